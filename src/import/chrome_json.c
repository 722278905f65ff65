/* chrome_json.c: the Chrome Trace Event JSON reader (loupe/reader.h).
 *
 * The text (gunzipped by read.c) is walked by loupe's pull parser (json.c): the top level here,
 * one event at a time there, each event built into the model (model/builder.h) with absolute
 * times, which finish_model makes relative at the end. No tree of the whole trace is ever built,
 * and nothing is parsed twice. The format: the Trace Event Format spec (Google doc
 * "Trace Event Format", 2016) as catapult's and Perfetto's JSON importers read it
 * (perfetto/src/trace_processor/importers/json/json_trace_parser.cc).
 *
 * What is read:
 * - Containers: {"traceEvents":[...], ...} and [...]. Input that ends early (a writer that
 *   crashed: an array or object not closed, a cut last event) keeps its complete events and the
 *   model says what was dropped and where (a warning; Perfetto reads such files the same way,
 *   silently). A trailing ',' before the closing ']' is accepted. A UTF-8 BOM is skipped. A
 *   second "traceEvents" key is read too, with a warning.
 * - Phases: X; B/E (a stack per thread: E closes the innermost open B whatever its name, and its
 *   args are merged into the slice; an E with no open B, or earlier than it, is ignored and
 *   counted in unmatched_ends; a B still open ends at the trace's last timestamp, flagged
 *   LOUPE_SLICE_TRUNCATED, as is a slice with the arg loupe_truncated: true, which loupe's writer
 *   adds); i/I; C (each numeric arg is a sample, numeric strings read as doubles); M
 *   process_name / thread_name; flows v2 (bind_id with flow_out / flow_in on X or B; integer
 *   ids, hex strings as Perfetto reads them, other strings hashed) and v1 (s / t / f keyed by
 *   (id, cat, name); s, t and f with bp "e" bind to the innermost slice enclosing ts, f else to
 *   the next slice to begin on the thread), ends chained in time order; async b / e / n (Chrome's
 * nestable async events) onto the LOUPE_TRACK_ASYNC track of (pid, cat, id), named by the
 * loupe_track member (loupe's writer puts the model track's name there), else the first event's
 * name, else its cat; an e closes the latest open b of its track with the same name (else the
 * latest one); an async event with no id is rejected. Every other phase (samples, objects, ...) and
 * empty {} events are skipped.
 * - CPU samples: the top-level "stackFrames" dictionary and "samples" array (the format's
 *   "StackFrames Dictionary" and "Global Samples"; see read_samples at the end of this file).
 * - Time: ts/dur in µs, converted to ns exactly from the decimal text (round half away from
 *   zero past 3 decimals), numeric strings accepted as Perfetto does. An event whose ts is
 *   negative or whose ts, dur or end is beyond 2^62 ns (146 years) is excluded and counted in a
 *   warning (one such ts would stretch the trace over years); an X with a negative dur likewise.
 *   Times are made relative to the smallest ts (M events excluded) unless the file is loupe's
 *   (a "loupe_version" key in "metadata" or "otherData"): its ts already are.
 * - Processes and threads: one model process per pid (any uint64), in the order first seen
 *   (processes[0], the model's pid, is the first; a loupe file's metadata "pid" wins), named by
 *   its process_name; one model thread per (pid, tid), so two pids never share a thread; an event
 *   with no tid (or tid 0, as Perfetto) uses its pid. A string pid/tid that is not a number
 *   becomes a hash and names the thread (as Perfetto's JSON importer does). loupe's GPU processes
 * (pid LOUPE__GPU_PID_BASE + device, model/tracks.h) give GPU tracks of processes[0]. Counters
 *   belong to their event's process. M events without a tid are applied at the end
 *   (apply_pending: uftrace's per-thread M events).
 * - Integers are exact from INT64_MIN to UINT64_MAX (args: LOUPE_ARG_INT64, or LOUPE_ARG_UINT64
 *   above INT64_MAX). An args object may carry "loupe_types": {"<key>": "int64" | "uint64"}: the
 *   string value of <key> is then that integer (loupe's writer puts integers beyond 2^53 so, as
 *   JavaScript rounds larger numbers); the hint itself is not an arg.
 * - Metadata: in a loupe file, loupe's keys map back onto the model's fields (see read_meta; the
 *   writer's sums events_recorded / events_dropped / truncated_zones are derived, not kept), any
 *   other key goes to model->metadata (non-string values as compact JSON). Other files: every key.
 *
 * What is rejected (LOUPE_EFORMAT; "event N" is the 0-based index in traceEvents): a syntax
 * error with "line L column C: <what>" (NaN, Infinity, a missing ',', nesting deeper than 1000
 * levels, text after the end); no traceEvents array; an event that is not an object or has no
 * string "ph"; ts missing (except on M) or not a number; X without dur; a pid/tid that is neither
 * a number nor a string; a name or cat that is not a string; a loupe metadata number that does
 * not parse. Ignored without error: args that are not an object (an arg whose value is null
 * reads as the string "null"), counter args that are not numbers, a bind_id without a
 * direction, flow ends that pair with nothing.
 */
#include "base/array.h"
#include "base/error.h"
#include "base/hash.h"
#include "import/json.h"
#include "import/readers.h"
#include "model/builder.h"
#include "model/tracks.h"

#include <loupe/reader.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NS_LIMIT ((int64_t)1 << 62) /* |ts|, dur and ends: differences stay within uint64 */

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* ---- the reader's state ---- */

typedef struct open_b {
    size_t slice;
    int64_t start_ns; /* absolute (file) time */
    uint64_t id;      /* a b event's id (its lane's, in loupe's files), 0 for B */
} open_b;

typedef struct tstate {
    open_b *stack;
    size_t depth, cap;
    uint64_t events;
} tstate;

/* One end of a flow: v2 (bind_id on a slice) or v1 (an s / t / f event, bound to a slice once
 * every slice is known). Ends with equal (v1, key) chain in time order. */
typedef struct flow_end {
    uint64_t key; /* v2: the id; v1: a hash of (id, cat, name), the key catapult and Perfetto use */
    uint64_t id;
    size_t thread, slice, order; /* slice SIZE_MAX: v1, not bound yet (or bound to nothing) */
    int64_t ts_ns;
    int in, out, v1, next; /* next: v1 f without bp "e" binds to the next slice to begin */
} flow_end;

/* A process_name / thread_name M event without a tid, applied at the end (see apply_pending). */
typedef struct pending_name {
    uint64_t pid;
    const char *name;
    int thread;
} pending_name;

/* A track's key: a thread (cat NULL) or an async track (cat interned, tid = the event id). */
typedef struct track_key {
    uint64_t tid;
    size_t process;
    const char *cat;
} track_key;

/* An event's members, found in one pass (the last one of a repeated key wins). */
typedef struct evf {
    const loupe__jnode *ph, *ts, *dur, *pid, *tid, *name, *cat, *args, *id, *bind_id, *flow_in,
        *flow_out, *bp, *loupe_track, *loupe_track_id;
} evf;

typedef struct reader {
    const char *path;
    loupe__mb *mb;
    loupe_model *m;
    loupe__jp p; /* events and scratch values */
    loupe__jp q; /* metadata / otherData: their nodes live to the end */
    int loupe;   /* the file is loupe's (metadata loupe_version) */
    /* (process, tid, cat) -> track index: open addressing, value index+1 (0 = empty) */
    track_key *hkey;
    size_t *hval;
    size_t hcap, hcount;
    tstate *ts;
    size_t ts_cap;
    flow_end *flows;
    size_t flow_count, flow_cap;
    loupe_arg *args;
    size_t args_cap;
    char *dump; /* compact JSON of an arg or metadata value */
    size_t dump_len, dump_cap;
    /* the span of the trace (absolute ns) and its first pid, found as events are read */
    int have_time;
    int64_t min_ns, max_ns;
    uint64_t last_pid; /* the process of the last pid looked up (a trace has few) */
    size_t last_process;
    pending_name *pending;
    size_t pending_count, pending_cap;
    /* thread_name's loupe_tid: a track the writer gave a fresh tid (a reused one), and its own,
     * given back after the last event (the file's events and keys use the fresh one) */
    struct retid {
        size_t thread;
        uint64_t tid;
    } * retids;
    size_t retid_count, retid_cap;
    int64_t origin_ns; /* subtracted from every time at the end (finish_model) */
    uint64_t unmatched;
    /* excluded events, reported at the end: times out of range, X with a negative dur */
    uint64_t bad_time, neg_dur;
    size_t bad_time_first, neg_dur_first;
    char bad_time_text[48];
    /* the window (see refill): p.t holds cap bytes, p.t[0] is byte base of the text */
    size_t cap, base;
    size_t lines_before, line_start; /* newlines before the window; where the line began */
    size_t *nl;                      /* absolute offsets of the newlines in the window */
    size_t nl_count, nl_cap;
    loupe__read_fn more;
    void *ctx;
    int eof, io_rc;
    char **copies; /* the text of the metadata values (r->q's strings point into them) */
    size_t ncopies, copies_cap;
    /* "stackFrames", "samples", "loupeSamples" (indices into r->q.nodes) when present */
    uint32_t sf_v, smp_v, ls_v;
    int has_sf, has_smp, has_ls;
    /* fast_x's caches: the last (pid, tid) and its track, the last name interned */
    int fx_have;
    uint64_t fx_pid, fx_tid;
    size_t fx_track;
    const char *fx_name, *fx_empty;
    size_t fx_name_len;
} reader;

static int read_samples(reader *r, uint64_t origin);

static int oom(reader *r) {
    return loupe__err(LOUPE_ENOMEM, "out of memory reading %s (at byte %zu, %zu threads)", r->path,
                      r->base + r->p.i, r->m != NULL ? r->m->thread_count : 0);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static uint64_t track_hash(const track_key *k) {
    return hash_u64(k->tid ^ ((uint64_t)k->process * 0x9e3779b97f4a7c15ull) ^
                    (uint64_t)(uintptr_t)k->cat);
}

/* The model track for a key (created when missing: a thread, or with a cat an async track of
 * that process); SIZE_MAX on out-of-memory. */
static size_t track_of(reader *r, size_t process, uint64_t tid, const char *cat) {
    if (r->hcount * 2 >= r->hcap) {
        size_t nc = r->hcap ? r->hcap * 2 : 64;
        track_key *nk = calloc(nc, sizeof(*nk));
        size_t *nv = calloc(nc, sizeof(*nv));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            return SIZE_MAX;
        }
        for (size_t i = 0; i < r->hcap; i++) {
            if (r->hval[i] != 0) {
                size_t j = (size_t)track_hash(&r->hkey[i]) & (nc - 1);
                while (nv[j] != 0) {
                    j = (j + 1) & (nc - 1);
                }
                nk[j] = r->hkey[i];
                nv[j] = r->hval[i];
            }
        }
        free(r->hkey);
        free(r->hval);
        r->hkey = nk;
        r->hval = nv;
        r->hcap = nc;
    }
    track_key key = {tid, process, cat};
    size_t j = (size_t)track_hash(&key) & (r->hcap - 1);
    while (r->hval[j] != 0) {
        const track_key *e = &r->hkey[j];
        if (e->tid == tid && e->process == process && e->cat == cat) {
            return r->hval[j] - 1;
        }
        j = (j + 1) & (r->hcap - 1);
    }
    size_t t;
    if (cat == NULL) {
        t = loupe__mb_thread_in(r->mb, process, tid);
    } else {
        /* An async track: its own key, never a thread's (a thread may have the same number). */
        t = loupe__mb_thread_add(r->mb, tid);
        if (t != SIZE_MAX) {
            loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
            th->kind = LOUPE_TRACK_ASYNC;
            th->process = process;
        }
    }
    if (t == SIZE_MAX || loupe__grow((void **)&r->ts, &r->ts_cap, t + 1, sizeof(tstate)) != 0) {
        return SIZE_MAX;
    }
    r->hkey[j] = key;
    r->hval[j] = t + 1;
    r->hcount++;
    return t;
}

static size_t thread_of(reader *r, size_t process, uint64_t tid) {
    return track_of(r, process, tid, NULL);
}

/* loupe's GPU tracks (model/tracks.h): pid LOUPE__GPU_PID_BASE + device with a LOUPE__GPU_TID
 * tid of that device. They belong to processes[0] and are GPU tracks again when read back. */
static int gpu_track(uint64_t pid, uint64_t tid, uint32_t *device) {
    if (pid < LOUPE__GPU_PID_BASE || pid - LOUPE__GPU_PID_BASE > 255 || (tid >> 40) != 1 ||
        ((tid >> 32) & 0xff) != pid - LOUPE__GPU_PID_BASE) {
        return 0;
    }
    *device = (uint32_t)(pid - LOUPE__GPU_PID_BASE);
    return 1;
}

/* The model process of a pid: one per pid, in the order first seen. SIZE_MAX on OOM. */
static size_t process_of(reader *r, uint64_t pid) {
    if (r->last_process != SIZE_MAX && r->last_pid == pid) {
        return r->last_process;
    }
    size_t p = loupe__mb_process(r->mb, pid);
    r->last_pid = pid;
    r->last_process = p;
    return p;
}

/* Parses a whole string as a finite double. */
static int str_double(const char *s, double *out) {
    char *end;
    if (*s == 0 || is_space(*s)) {
        return 0;
    }
    errno = 0;
    double d = strtod(s, &end);
    if (*end != 0 || errno == ERANGE || !isfinite(d)) {
        return 0;
    }
    *out = d;
    return 1;
}

/* Parses a whole string as a uint64 in base (10 or 16, "0x" allowed for 16). */
static int str_u64(const char *s, int base, uint64_t *out) {
    char *end;
    if (!is_digit(*s) && !(base == 16 && ((*s >= 'a' && *s <= 'f') || (*s >= 'A' && *s <= 'F')))) {
        return 0;
    }
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (*end != 0 || errno == ERANGE) {
        return 0;
    }
    *out = v;
    return 1;
}

/* ---- field helpers ---- */

static const char *type_name(const loupe__jnode *v) {
    static const char *const names[] = {"null",     "false",    "true",     "a number",
                                        "a string", "an array", "an object"};
    return names[v->type];
}

/* The members of an event, in one pass over them. */
static void event_fields(const loupe__jp *p, const loupe__jnode *ev, evf *f) {
    memset(f, 0, sizeof(*f));
    for (uint32_t i = ev->first; i != 0; i = p->nodes[i].next) {
        const loupe__jnode *v = &p->nodes[i];
        const char *k = v->key;
        const loupe__jnode **slot = NULL;
        switch (k[0]) {
        case 'p':
            slot = strcmp(k, "ph") == 0 ? &f->ph : strcmp(k, "pid") == 0 ? &f->pid : NULL;
            break;
        case 't':
            slot = strcmp(k, "ts") == 0 ? &f->ts : strcmp(k, "tid") == 0 ? &f->tid : NULL;
            break;
        case 'd':
            slot = strcmp(k, "dur") == 0 ? &f->dur : NULL;
            break;
        case 'n':
            slot = strcmp(k, "name") == 0 ? &f->name : NULL;
            break;
        case 'c':
            slot = strcmp(k, "cat") == 0 ? &f->cat : NULL;
            break;
        case 'a':
            slot = strcmp(k, "args") == 0 ? &f->args : NULL;
            break;
        case 'i':
            slot = strcmp(k, "id") == 0 ? &f->id : NULL;
            break;
        case 'b':
            slot = strcmp(k, "bind_id") == 0 ? &f->bind_id : strcmp(k, "bp") == 0 ? &f->bp : NULL;
            break;
        case 'l':
            slot = strcmp(k, "loupe_track") == 0      ? &f->loupe_track
                   : strcmp(k, "loupe_track_id") == 0 ? &f->loupe_track_id
                                                      : NULL;
            break;
        case 'f':
            slot = strcmp(k, "flow_in") == 0    ? &f->flow_in
                   : strcmp(k, "flow_out") == 0 ? &f->flow_out
                                                : NULL;
            break;
        default:
            break;
        }
        if (slot != NULL) {
            *slot = v->type == LOUPE__J_NULL ? NULL : v;
        }
    }
}

/* A time field (µs) in ns. 1 when present and in range; 0 when absent; -1 when out of range
 * (*text then says what it was); LOUPE_EFORMAT when not a number. */
static int get_ns(reader *r, const loupe__jnode *v, size_t idx, const char *field, int64_t *out,
                  char *text, size_t text_size) {
    if (v == NULL) {
        return 0;
    }
    double d;
    if (v->type == LOUPE__J_NUM) {
        if (loupe__jp_scaled(v, 3, NS_LIMIT, out) && *out > -NS_LIMIT) {
            return 1;
        }
        snprintf(text, text_size, "%s %.*s", field, v->len > 40 ? 40 : (int)v->len, v->s);
        if (loupe__jp_scaled(v, 3, NS_LIMIT, out)) {
            return -1;
        }
        d = loupe__jp_double(v);
    } else if (v->type == LOUPE__J_STR) {
        if (!str_double(v->s, &d)) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a number (\"%.40s\")",
                              r->path, idx, field, v->s);
        }
        snprintf(text, text_size, "%s \"%.36s\"", field, v->s);
    } else {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a number (%s)", r->path, idx,
                          field, type_name(v));
    }
    if (!isfinite(d) || fabs(d) * 1000.0 >= (double)NS_LIMIT) {
        return -1;
    }
    *out = (int64_t)llround(d * 1000.0);
    return 1;
}

/* A pid / tid / id: integers (negative ones wrap), integral reals, numeric strings (base),
 * other strings hashed (*str_out is then the string, when str_out != NULL). -1 when it is of
 * no usable type. */
static int get_id(const loupe__jnode *v, int base, uint64_t *out, const char **str_out) {
    if (str_out != NULL) {
        *str_out = NULL;
    }
    int64_t i;
    if (loupe__jp_u64(v, out)) {
        return 0;
    }
    if (loupe__jp_i64(v, &i)) {
        *out = (uint64_t)i;
        return 0;
    }
    if (v->type == LOUPE__J_NUM) {
        double d = loupe__jp_double(v);
        if (d != floor(d) || fabs(d) >= 9.2e18) {
            return -1;
        }
        *out = (uint64_t)(int64_t)d;
        return 0;
    }
    if (v->type == LOUPE__J_STR) {
        if (str_u64(v->s, base, out)) {
            return 0;
        }
        *out = loupe__hash_bytes(v->s, strlen(v->s));
        if (str_out != NULL) {
            *str_out = v->s;
        }
        return 0;
    }
    return -1;
}

/* A string field: "" when absent; error when present and not a string. */
static int get_str(reader *r, const loupe__jnode *v, size_t idx, const char *field,
                   const char **out) {
    *out = "";
    if (v == NULL) {
        return 0;
    }
    if (v->type != LOUPE__J_STR) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a string (%s)", r->path, idx,
                          field, type_name(v));
    }
    *out = v->s;
    return 0;
}

/* Compact JSON of any value, interned into the model. */
static const char *json_text(reader *r, const loupe__jp *p, const loupe__jnode *v) {
    r->dump_len = 0;
    if (loupe__jp_dump(p, v, &r->dump, &r->dump_len, &r->dump_cap) != 0) {
        return NULL;
    }
    return loupe__mb_str(r->mb, r->dump);
}

/* The type loupe_types gives key, 0 when none. */
static loupe_arg_type hinted(const loupe__jp *p, const loupe__jnode *types, const char *key) {
    const loupe__jnode *h = types != NULL ? loupe__jp_get(p, types, key) : NULL;
    if (h == NULL || h->type != LOUPE__J_STR) {
        return 0;
    }
    return strcmp(h->s, "int64") == 0    ? LOUPE_ARG_INT64
           : strcmp(h->s, "uint64") == 0 ? LOUPE_ARG_UINT64
                                         : 0;
}

/* Converts an args object into r->args; *n entries. Non-objects give no args. */
static int conv_args(reader *r, const loupe__jnode *args, uint32_t *n) {
    *n = 0;
    if (args == NULL || args->type != LOUPE__J_OBJ) {
        return 0;
    }
    const loupe__jp *p = &r->p;
    size_t count = args->count;
    if (loupe__grow((void **)&r->args, &r->args_cap, count, sizeof(loupe_arg)) != 0) {
        return oom(r);
    }
    const loupe__jnode *types = loupe__jp_get(p, args, "loupe_types");
    types = types != NULL && types->type == LOUPE__J_OBJ ? types : NULL;
    for (uint32_t i = args->first; i != 0; i = p->nodes[i].next) {
        const loupe__jnode *v = &p->nodes[i];
        if (types != NULL && v == types) {
            continue;
        }
        loupe_arg *a = &r->args[(*n)++];
        memset(a, 0, sizeof(*a));
        a->key = v->key;
        loupe_arg_type h = v->type == LOUPE__J_STR && types ? hinted(p, types, v->key) : 0;
        uint64_t u;
        if (h == LOUPE_ARG_UINT64 && str_u64(v->s, 10, &u)) {
            a->type = LOUPE_ARG_UINT64;
            a->v.u = u;
        } else if (h == LOUPE_ARG_INT64 && v->s[0] == '-' && str_u64(v->s + 1, 10, &u) &&
                   u <= (uint64_t)INT64_MAX + 1) {
            a->type = LOUPE_ARG_INT64;
            a->v.i = u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u;
        } else if (h == LOUPE_ARG_INT64 && str_u64(v->s, 10, &u) && u <= (uint64_t)INT64_MAX) {
            a->type = LOUPE_ARG_INT64;
            a->v.i = (int64_t)u;
        } else if (loupe__jp_i64(v, &a->v.i)) {
            a->type = LOUPE_ARG_INT64;
        } else if (loupe__jp_u64(v, &a->v.u)) {
            a->type = LOUPE_ARG_UINT64;
        } else if (v->type == LOUPE__J_NUM) {
            a->type = LOUPE_ARG_DOUBLE;
            a->v.d = loupe__jp_double(v);
        } else if (v->type == LOUPE__J_TRUE || v->type == LOUPE__J_FALSE) {
            a->type = LOUPE_ARG_BOOL;
            a->v.b = v->type == LOUPE__J_TRUE;
        } else if (v->type == LOUPE__J_STR) {
            a->type = LOUPE_ARG_STRING;
            a->v.s = v->s;
        } else {
            a->type = LOUPE_ARG_STRING;
            a->v.s = json_text(r, p, v);
            if (a->v.s == NULL) {
                return oom(r);
            }
        }
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* An event's pid and tid (tid = pid when absent or 0); a string that is no number is hashed and
 * given back in *tname (the thread's name then). */
static int event_ids(reader *r, const evf *f, size_t idx, uint64_t *pid_out, uint64_t *tid_out,
                     const char **tname_out) {
    uint64_t tid = 0, pid = 0;
    const char *tname = NULL, *pname = NULL;
    if (f->tid != NULL && get_id(f->tid, 10, &tid, &tname) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: tid is not an integer (%s)", r->path, idx,
                          type_name(f->tid));
    }
    if (f->pid != NULL && get_id(f->pid, 10, &pid, &pname) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer (%s)", r->path, idx,
                          type_name(f->pid));
    }
    if (tid == 0) {
        tid = pid;
        tname = pname;
    }
    *pid_out = pid;
    *tid_out = tid;
    *tname_out = tname;
    return 0;
}

/* The thread an event belongs to: (pid, tid), tid = pid when absent or 0; each pid is a process
 * of its own (two pids' tid 7 are two threads). */
static int event_thread(reader *r, const evf *f, size_t idx, size_t *out) {
    uint64_t tid, pid;
    const char *tname;
    int rc = event_ids(r, f, idx, &pid, &tid, &tname);
    if (rc != 0) {
        return rc;
    }
    uint32_t device;
    int gpu = gpu_track(pid, tid, &device);
    size_t p = gpu ? 0 : process_of(r, pid);
    size_t t = p == SIZE_MAX ? SIZE_MAX : thread_of(r, p, tid);
    if (t == SIZE_MAX) {
        return oom(r);
    }
    loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
    if (gpu) {
        th->kind = LOUPE_TRACK_GPU;
        th->device = device;
    }
    if (tname != NULL && th->name[0] == 0) {
        loupe__mb_thread_name(r->mb, t, tname);
    }
    *out = t;
    return 0;
}

/* The async track of a b / e / n event: (pid, cat, id), named by "loupe_track" (loupe's writer
 * puts the model track's name there) or else the first event's name, or its cat. */
static int event_async(reader *r, const evf *f, size_t idx, const char *name, size_t *out) {
    uint64_t tid, pid, id;
    const char *tname, *cat = "";
    int rc = event_ids(r, f, idx, &pid, &tid, &tname);
    if (rc != 0 || (rc = get_str(r, f->cat, idx, "cat", &cat)) != 0) {
        return rc;
    }
    if (f->id == NULL || get_id(f->id, 16, &id, NULL) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: async event without an id", r->path, idx);
    }
    /* loupe's writer gives each lane of an overlapping track its own id (viewers pair b / e
     * per id, last in first out) and names the track's own id in loupe_track_id: the lanes
     * are one track again */
    uint64_t track_id;
    if (f->loupe_track_id != NULL && get_id(f->loupe_track_id, 16, &track_id, NULL) == 0) {
        id = track_id;
    }
    size_t p = process_of(r, pid);
    size_t t = p == SIZE_MAX ? SIZE_MAX : track_of(r, p, id, loupe__mb_str(r->mb, cat));
    if (t == SIZE_MAX || loupe__mb_failed(r->mb)) {
        return oom(r);
    }
    if (loupe__mb_thread_at(r->mb, t)->name[0] == 0) {
        const char *tn = name[0] ? name : cat;
        if (f->loupe_track != NULL && f->loupe_track->type == LOUPE__J_STR) {
            tn = f->loupe_track->s;
        }
        loupe__mb_thread_name(r->mb, t, tn);
    }
    *out = t;
    return 0;
}

static uint64_t rel(const reader *r, int64_t ns) {
    return (uint64_t)ns - (uint64_t)r->origin_ns;
}

static int add_flow_end(reader *r, const flow_end *f) {
    if (loupe__grow((void **)&r->flows, &r->flow_cap, r->flow_count + 1, sizeof(flow_end)) != 0) {
        return oom(r);
    }
    r->flows[r->flow_count++] = *f;
    return 0;
}

static int is_true(const loupe__jnode *v) {
    return v != NULL && v->type == LOUPE__J_TRUE;
}

/* Records a flow v2 end (bind_id with flow_in / flow_out) of a slice. */
static int flow_v2_end(reader *r, const evf *ev, size_t t, size_t slice, int64_t start,
                       size_t idx) {
    int in = is_true(ev->flow_in), out = is_true(ev->flow_out);
    uint64_t id;
    if (ev->bind_id == NULL || (!in && !out) || get_id(ev->bind_id, 16, &id, NULL) != 0) {
        return 0;
    }
    flow_end f = {.key = id,
                  .id = id,
                  .thread = t,
                  .slice = slice,
                  .order = idx,
                  .ts_ns = start,
                  .in = in,
                  .out = out};
    return add_flow_end(r, &f);
}

/* Records a flow v1 event (s start, t step, f end); it is bound to a slice by bind_v1_flows. */
static int flow_v1_end(reader *r, const evf *ev, size_t idx, char ph, int64_t ts) {
    uint64_t id;
    const char *cat, *name;
    size_t t;
    int rc;
    if (ev->id == NULL || get_id(ev->id, 16, &id, NULL) != 0) {
        return 0; /* no usable id: nothing to pair it with */
    }
    if ((rc = get_str(r, ev->cat, idx, "cat", &cat)) != 0 ||
        (rc = get_str(r, ev->name, idx, "name", &name)) != 0 ||
        (rc = event_thread(r, ev, idx, &t)) != 0) {
        return rc;
    }
    uint64_t key = loupe__hash_bytes((const char *)&id, sizeof(id)) ^
                   loupe__hash_bytes(cat, strlen(cat) + 1) * 31 ^
                   loupe__hash_bytes(name, strlen(name) + 1) * 961;
    int enclosing = ev->bp != NULL && ev->bp->type == LOUPE__J_STR && strcmp(ev->bp->s, "e") == 0;
    flow_end f = {.key = key,
                  .id = id,
                  .thread = t,
                  .slice = SIZE_MAX,
                  .order = idx,
                  .ts_ns = ts,
                  .in = ph != 's',
                  .out = ph != 'f',
                  .v1 = 1,
                  .next = ph == 'f' && !enclosing};
    return add_flow_end(r, &f);
}

/* A slice's sort key with its index: the comparator needs no global (qsort has no context
 * argument, and qsort_r is not C11), so readers on two threads never share state. */
typedef struct slice_key {
    uint64_t start_ns, dur_ns;
    size_t index;
} slice_key;

static int cmp_slice_key(const void *pa, const void *pb) {
    const slice_key *a = pa, *b = pb;
    if (a->start_ns != b->start_ns) {
        return a->start_ns < b->start_ns ? -1 : 1;
    }
    if (a->dur_ns != b->dur_ns) {
        return a->dur_ns > b->dur_ns ? -1 : 1;
    }
    return a->index < b->index ? -1 : 1;
}

/* Binds v1 flow ends to slices of their thread: s, t and f with bp "e" to the innermost slice
 * enclosing ts, f otherwise to the first slice beginning at or after ts (catapult's rules). */
static int bind_v1_flows(reader *r) {
    slice_key *order = NULL;
    size_t order_thread = SIZE_MAX;
    for (size_t i = 0; i < r->flow_count; i++) {
        flow_end *f = &r->flows[i];
        if (!f->v1) {
            continue;
        }
        const loupe_model_thread *th = loupe__mb_thread_at(r->mb, f->thread);
        size_t n = th->slice_count;
        if (n == 0) {
            continue;
        }
        if (order_thread != f->thread) {
            /* flows are few: re-sort per thread change rather than keep one index per thread */
            free(order);
            order = malloc(n * sizeof(slice_key));
            if (order == NULL) {
                return oom(r);
            }
            for (size_t k = 0; k < n; k++) {
                order[k] = (slice_key){th->slices[k].start_ns, th->slices[k].dur_ns, k};
            }
            qsort(order, n, sizeof(slice_key), cmp_slice_key);
            order_thread = f->thread;
        }
        uint64_t ts = rel(r, f->ts_ns);
        /* lo = the number of slices starting before ts (or at ts, for enclosing) */
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            uint64_t st = order[mid].start_ns;
            if (f->next ? st < ts : st <= ts) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (f->next) {
            f->slice = lo < n ? order[lo].index : SIZE_MAX;
            continue;
        }
        for (size_t k = lo; k-- > 0;) {
            if (ts <= order[k].start_ns + order[k].dur_ns) {
                f->slice = order[k].index;
                break;
            }
        }
    }
    free(order);
    return 0;
}

static int cmp_flow_end(const void *pa, const void *pb) {
    const flow_end *a = pa, *b = pb;
    if (a->v1 != b->v1) {
        return a->v1 < b->v1 ? -1 : 1;
    }
    if (a->key != b->key) {
        return a->key < b->key ? -1 : 1;
    }
    if (a->ts_ns != b->ts_ns) {
        return a->ts_ns < b->ts_ns ? -1 : 1;
    }
    return a->order < b->order ? -1 : (a->order > b->order);
}

/* Pairs flow ends: per key in time order, each end that takes a flow in is linked from the last
 * end that sent one out. */
static int link_flows(reader *r) {
    int rc = bind_v1_flows(r);
    if (rc != 0) {
        return rc;
    }
    if (r->flow_count > 1) {
        qsort(r->flows, r->flow_count, sizeof(flow_end), cmp_flow_end);
    }
    const flow_end *src = NULL;
    for (size_t i = 0; i < r->flow_count; i++) {
        const flow_end *f = &r->flows[i];
        if (f->slice == SIZE_MAX) {
            continue;
        }
        if (src != NULL && (src->key != f->key || src->v1 != f->v1)) {
            src = NULL;
        }
        if (f->in && src != NULL &&
            loupe__mb_flow(r->mb, f->id, src->thread, src->slice, f->thread, f->slice) != 0) {
            return oom(r);
        }
        if (f->out) {
            src = f;
        }
    }
    return 0;
}

/* ---- events ---- */

static int timed_phase(char ph) {
    return ph == 'X' || ph == 'B' || ph == 'E' || ph == 'i' || ph == 'I' || ph == 'C' ||
           ph == 's' || ph == 't' || ph == 'f' || ph == 'b' || ph == 'e' || ph == 'n';
}

static int do_slice(reader *r, const evf *ev, size_t idx, char ph, int64_t ts, int64_t dur) {
    size_t t;
    const char *name, *cat;
    uint32_t nargs;
    int rc;
    if ((rc = get_str(r, ev->name, idx, "name", &name)) != 0 ||
        (rc = (ph == 'b' ? event_async(r, ev, idx, name, &t) : event_thread(r, ev, idx, &t))) !=
            0 ||
        (rc = get_str(r, ev->cat, idx, "cat", &cat)) != 0 ||
        (rc = conv_args(r, ev->args, &nargs)) != 0) {
        return rc;
    }
    tstate *st = &r->ts[t];
    st->events++;
    size_t s = loupe__mb_slice(r->mb, t);
    if (s == SIZE_MAX) {
        return oom(r);
    }
    loupe_slice *sl = loupe__mb_slice_at(r->mb, t, s);
    sl->start_ns = (uint64_t)ts; /* absolute until finish_model */
    sl->dur_ns = (uint64_t)dur;
    sl->name = loupe__mb_str(r->mb, name);
    loupe__mb_slice_category(r->mb, t, s, cat);
    /* loupe's writer marks a zone still open at the stop with the arg loupe_truncated: true */
    for (uint32_t k = 0; k < nargs; k++) {
        if (r->args[k].type == LOUPE_ARG_BOOL && strcmp(r->args[k].key, "loupe_truncated") == 0) {
            sl->flags |= r->args[k].v.b ? LOUPE_SLICE_TRUNCATED : 0;
            memmove(&r->args[k], &r->args[k + 1], (nargs - k - 1) * sizeof(loupe_arg));
            nargs--;
            break;
        }
    }
    if (loupe__mb_slice_args(r->mb, t, s, r->args, nargs) != 0) {
        return oom(r);
    }
    if (ph == 'B' || ph == 'b') {
        if (loupe__grow((void **)&st->stack, &st->cap, st->depth + 1, sizeof(open_b)) != 0) {
            return oom(r);
        }
        uint64_t id = 0;
        if (ph == 'b') {
            (void)get_id(ev->id, 16, &id, NULL); /* event_async checked it */
        }
        st->stack[st->depth++] = (open_b){s, ts, id};
    }
    return flow_v2_end(r, ev, t, s, ts, idx);
}

/* E: closes the innermost open B of the thread; merges its args (replacing equal keys).
 * e: closes the latest open b of its async track with the same name (async slices need not
 * nest: b A, b B, e A closes A), else the latest one. */
static int do_end(reader *r, const evf *ev, size_t idx, char ph, int64_t ts) {
    size_t t;
    uint32_t nargs;
    int rc;
    const char *name = "";
    if (ph == 'e' && ((rc = get_str(r, ev->name, idx, "name", &name)) != 0 ||
                      (rc = event_async(r, ev, idx, name, &t)) != 0)) {
        return rc;
    }
    if (ph == 'E' && (rc = event_thread(r, ev, idx, &t)) != 0) {
        return rc;
    }
    tstate *st = &r->ts[t];
    st->events++;
    size_t open = st->depth;
    if (ph == 'e') {
        /* the latest open b with this e's id and name, else with its name, else the latest:
         * the lanes of one track (loupe_track_id) overlap, each with its own id */
        const loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
        uint64_t id = 0;
        (void)get_id(ev->id, 16, &id, NULL); /* event_async checked it */
        for (int pass = 0; pass < 3; pass++) {
            open = st->depth;
            while (pass < 2 && open > 0 &&
                   ((pass == 0 && st->stack[open - 1].id != id) ||
                    (name[0] && strcmp(th->slices[st->stack[open - 1].slice].name, name) != 0))) {
                open--;
            }
            if (open > 0) {
                break;
            }
        }
    }
    if (open == 0 || ts < st->stack[open - 1].start_ns) {
        r->unmatched++;
        return 0;
    }
    open_b b = st->stack[open - 1];
    memmove(&st->stack[open - 1], &st->stack[open], (st->depth - open) * sizeof(open_b));
    st->depth--;
    loupe__mb_slice_at(r->mb, t, b.slice)->dur_ns = (uint64_t)(ts - b.start_ns);
    if ((rc = conv_args(r, ev->args, &nargs)) != 0) {
        return rc;
    }
    for (uint32_t i = 0; i < nargs; i++) {
        uint32_t have;
        loupe_arg *sargs = loupe__mb_slice_args_at(r->mb, t, b.slice, &have);
        const char *key = loupe__mb_str(r->mb, r->args[i].key);
        uint32_t k = 0;
        while (k < have && sargs[k].key != key) {
            k++;
        }
        if (k < have) {
            loupe_arg a = r->args[i];
            a.key = key;
            if (a.type == LOUPE_ARG_STRING) {
                a.v.s = loupe__mb_str(r->mb, a.v.s);
            }
            sargs[k] = a;
        } else if (loupe__mb_slice_add_arg(r->mb, t, b.slice, &r->args[i]) != 0) {
            return oom(r);
        }
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

static int do_instant(reader *r, const evf *ev, size_t idx, char ph, int64_t ts) {
    size_t t;
    const char *name;
    uint32_t nargs;
    int rc;
    if ((rc = get_str(r, ev->name, idx, "name", &name)) != 0 ||
        (rc = (ph == 'n' ? event_async(r, ev, idx, name, &t) : event_thread(r, ev, idx, &t))) !=
            0 ||
        (rc = conv_args(r, ev->args, &nargs)) != 0) {
        return rc;
    }
    r->ts[t].events++;
    if (loupe__mb_instant(r->mb, t, (uint64_t)ts, name, r->args, nargs) != 0) {
        return oom(r);
    }
    return 0;
}

/* C: one sample per numeric arg, named "<name>" when the only key is "value", else
 * "<name> <key>". */
static int do_counter(reader *r, const evf *ev, size_t idx, int64_t ts) {
    const char *name;
    int rc = get_str(r, ev->name, idx, "name", &name);
    if (rc != 0) {
        return rc;
    }
    const loupe__jnode *args = ev->args;
    if (args == NULL || args->type != LOUPE__J_OBJ) {
        return 0;
    }
    /* a counter track of the event's process */
    uint64_t pid = 0, tid;
    const char *tname;
    size_t process;
    if ((rc = event_ids(r, ev, idx, &pid, &tid, &tname)) != 0) {
        return rc;
    }
    if ((process = process_of(r, pid)) == SIZE_MAX) {
        return oom(r);
    }
    const loupe__jp *p = &r->p;
    const loupe__jnode *types = loupe__jp_get(p, args, "loupe_types");
    types = types != NULL && types->type == LOUPE__J_OBJ ? types : NULL;
    int only_value = args->count == 1u + (types != NULL) && loupe__jp_get(p, args, "value") != NULL;
    for (uint32_t i = args->first; i != 0; i = p->nodes[i].next) {
        const loupe__jnode *v = &p->nodes[i];
        if (v == types) {
            continue;
        }
        loupe_counter_sample c = {.ts_ns = (uint64_t)ts, .process = process};
        uint64_t u;
        double d;
        char *end = NULL;
        if (v->type == LOUPE__J_STR && hinted(p, types, v->key) == LOUPE_ARG_INT64 &&
            (errno = 0, c.i = strtoll(v->s, &end, 10), errno == 0 && end != v->s && *end == 0)) {
            /* an integer beyond 2^53, as loupe's writer puts it: exact */
        } else if (loupe__jp_i64(v, &c.i)) {
        } else if (loupe__jp_u64(v, &u)) {
            c.is_double = 1;
            c.d = (double)u;
        } else if (v->type == LOUPE__J_NUM) {
            c.is_double = 1;
            c.d = loupe__jp_double(v);
        } else if (v->type == LOUPE__J_STR && str_double(v->s, &d)) {
            c.is_double = 1;
            c.d = d;
        } else {
            continue;
        }
        const char *key = v->key;
        size_t nl = strlen(name), kl = strlen(key);
        char *full = malloc(nl + kl + 2);
        if (full == NULL) {
            return oom(r);
        }
        memcpy(full, name, nl);
        if (only_value) {
            full[nl] = 0;
        } else {
            full[nl] = ' ';
            memcpy(full + nl + 1, key, kl + 1);
        }
        c.name = full;
        rc = loupe__mb_counter(r->mb, &c);
        free(full);
        if (rc != 0) {
            return oom(r);
        }
    }
    return 0;
}

/* loupe's "loupe_process" M event (the writer's put_process_meta): the process of its pid gets
 * host, label, cmdline (strings), parent_pid and rank (integers); a field of another type is
 * left unset. */
static int do_process_meta(reader *r, const evf *ev, size_t idx) {
    uint64_t pid = 0;
    if (ev->pid != NULL && get_id(ev->pid, 10, &pid, NULL) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer", r->path, idx);
    }
    if (ev->args == NULL || ev->args->type != LOUPE__J_OBJ) {
        return 0;
    }
    size_t p = process_of(r, pid);
    if (p == SIZE_MAX) {
        return oom(r);
    }
    static const char *const strs[] = {"host", "label", "cmdline"};
    for (size_t i = 0; i < 3; i++) {
        const loupe__jnode *v = loupe__jp_get(&r->p, ev->args, strs[i]);
        if (v == NULL || v->type != LOUPE__J_STR) {
            continue;
        }
        const char *str = loupe__mb_str(r->mb, v->s);
        loupe_model_process *pr = loupe__mb_process_at(r->mb, p);
        if (i == 0) {
            pr->host = str;
        } else if (i == 1) {
            pr->label = str;
        } else {
            pr->cmdline = str;
        }
    }
    uint64_t u;
    int64_t i64;
    const loupe__jnode *v = loupe__jp_get(&r->p, ev->args, "parent_pid");
    if (v != NULL && loupe__jp_u64(v, &u)) {
        loupe__mb_process_at(r->mb, p)->parent_pid = u;
    }
    v = loupe__jp_get(&r->p, ev->args, "rank");
    if (v != NULL && loupe__jp_i64(v, &i64)) {
        loupe__mb_process_at(r->mb, p)->rank = i64;
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

static int do_meta_event(reader *r, const evf *ev, size_t idx) {
    const char *name;
    int rc = get_str(r, ev->name, idx, "name", &name);
    if (rc != 0) {
        return rc;
    }
    if (strcmp(name, "loupe_process") == 0) {
        return do_process_meta(r, ev, idx);
    }
    const loupe__jnode *nv = loupe__jp_get(&r->p, ev->args, "name");
    if (nv == NULL || nv->type != LOUPE__J_STR) {
        return 0;
    }
    if (ev->tid == NULL &&
        (strcmp(name, "thread_name") == 0 || strcmp(name, "process_name") == 0)) {
        uint64_t pid = 0;
        if (ev->pid != NULL && get_id(ev->pid, 10, &pid, NULL) != 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer", r->path, idx);
        }
        if (loupe__grow((void **)&r->pending, &r->pending_cap, r->pending_count + 1,
                        sizeof(pending_name)) != 0) {
            return oom(r);
        }
        r->pending[r->pending_count++] =
            (pending_name){pid, loupe__mb_str(r->mb, nv->s), name[0] == 't'};
    } else if (strcmp(name, "thread_name") == 0) {
        size_t t;
        if ((rc = event_thread(r, ev, idx, &t)) != 0) {
            return rc;
        }
        loupe__mb_thread_name(r->mb, t, nv->s);
        const loupe__jnode *lt = loupe__jp_get(&r->p, ev->args, "loupe_tid");
        uint64_t real;
        if (lt != NULL && loupe__jp_u64(lt, &real)) {
            if (loupe__grow((void **)&r->retids, &r->retid_cap, r->retid_count + 1,
                            sizeof(*r->retids)) != 0) {
                return oom(r);
            }
            r->retids[r->retid_count++] = (struct retid){t, real};
        }
    } else if (strcmp(name, "process_name") == 0) {
        uint64_t pid = 0;
        if (ev->pid != NULL && get_id(ev->pid, 10, &pid, NULL) != 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer", r->path, idx);
        }
        if (pid >= LOUPE__GPU_PID_BASE && pid - LOUPE__GPU_PID_BASE <= 255 &&
            strncmp(nv->s, "/device:GPU:", 12) == 0) {
            return 0; /* the process loupe's writer gives a GPU device's tracks (gpu_track) */
        }
        size_t p = process_of(r, pid);
        if (p == SIZE_MAX) {
            return oom(r);
        }
        loupe__mb_process_at(r->mb, p)->name = loupe__mb_str(r->mb, nv->s);
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* One event: times checked (and the trace's span updated), then built into the model with
 * absolute times; finish_model subtracts the origin. */
static int process_event(reader *r, const loupe__jnode *node, size_t idx) {
    if (node->type != LOUPE__J_OBJ) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: not an object (%s)", r->path, idx,
                          type_name(node));
    }
    if (node->count == 0) {
        return 0;
    }
    evf ev;
    event_fields(&r->p, node, &ev);
    if (ev.ph == NULL || ev.ph->type != LOUPE__J_STR) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: no \"ph\" string", r->path, idx);
    }
    char ph = ev.ph->len == 1 ? ev.ph->s[0] : '?';
    if (!timed_phase(ph) && ph != 'M') {
        return 0;
    }
    int64_t ts = 0, dur = 0;
    if (ph != 'M') {
        char text[48] = "";
        int has_ts = get_ns(r, ev.ts, idx, "ts", &ts, text, sizeof text);
        int has_dur = 0;
        if (has_ts < -1) {
            return has_ts;
        }
        if (ph == 'X' && (has_dur = get_ns(r, ev.dur, idx, "dur", &dur, text, sizeof text)) < -1) {
            return has_dur;
        }
        if (has_ts == 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: no ts", r->path, idx);
        }
        if (ph == 'X' && has_dur == 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: X without dur", r->path, idx);
        }
        if (has_ts < 0 || has_dur < 0 || ts < 0 ||
            (ph == 'X' && dur >= 0 && ts + dur >= NS_LIMIT)) {
            if (r->bad_time++ == 0) {
                r->bad_time_first = idx;
                if (text[0] == 0) { /* in range, but negative or ending too late */
                    snprintf(text, sizeof text, "ts %lld ns, dur %lld ns", (long long)ts,
                             (long long)dur);
                }
                memcpy(r->bad_time_text, text, sizeof r->bad_time_text);
            }
            return 0;
        }
        if (dur < 0) {
            if (r->neg_dur++ == 0) {
                r->neg_dur_first = idx;
            }
            return 0;
        }
        if (!r->have_time || ts < r->min_ns) {
            r->min_ns = ts;
        }
        if (!r->have_time || ts + dur > r->max_ns) {
            r->max_ns = ts + dur;
        }
        r->have_time = 1;
    }
    switch (ph) {
    case 'X':
    case 'B':
    case 'b':
        return do_slice(r, &ev, idx, ph, ts, dur);
    case 'E':
    case 'e':
        return do_end(r, &ev, idx, ph, ts);
    case 'i':
    case 'I':
    case 'n':
        return do_instant(r, &ev, idx, ph, ts);
    case 'C':
        return do_counter(r, &ev, idx, ts);
    case 'M':
        return do_meta_event(r, &ev, idx);
    default: /* s, t, f */
        return flow_v1_end(r, &ev, idx, ph, ts);
    }
}

/* ---- metadata ---- */

static const char *meta_text(reader *r, const loupe__jnode *v) {
    if (v->type == LOUPE__J_STR) {
        return loupe__mb_str(r->mb, v->s);
    }
    const char *t = json_text(r, &r->q, v);
    return t != NULL ? t : "";
}

static int meta_u64(reader *r, const char *key, const loupe__jnode *v, uint64_t *out) {
    if (loupe__jp_u64(v, out) || (v->type == LOUPE__J_STR && str_u64(v->s, 10, out))) {
        return 0;
    }
    return loupe__err(LOUPE_EFORMAT, "%s: metadata \"%s\" is not a non-negative integer", r->path,
                      key);
}

static int meta_double(reader *r, const char *key, const loupe__jnode *v, double *out) {
    if (v->type == LOUPE__J_NUM) {
        *out = loupe__jp_double(v);
        return 0;
    }
    if (v->type == LOUPE__J_STR && str_double(v->s, out)) {
        return 0;
    }
    return loupe__err(LOUPE_EFORMAT, "%s: metadata \"%s\" is not a number", r->path, key);
}

/* Reads "<digits><stop>" at *p into *out and moves *p past it. */
static int key_u64(const char **p, char stop, uint64_t *out) {
    char *end;
    if (!is_digit(**p)) {
        return 0;
    }
    errno = 0;
    *out = strtoull(*p, &end, 10);
    if (errno == ERANGE || *end != stop) {
        return 0;
    }
    *p = end + 1;
    return 1;
}

/* loupe_[pid_<pid>_]{thread,async}_<tid>_<field>: a track's loss accounting (the writer's keys:
 * the pid part for a process other than processes[0]). 1 when the key is one, 0 if not. */
static int meta_thread(reader *r, const char *key, const loupe__jnode *v, int *rc) {
    const char *p = key;
    uint64_t pid = 0, tid;
    size_t process = 0;
    if (strncmp(p, "loupe_", 6) != 0) {
        return 0;
    }
    p += 6;
    if (strncmp(p, "pid_", 4) == 0) {
        p += 4;
        if (!key_u64(&p, '_', &pid)) {
            return 0;
        }
        if ((process = process_of(r, pid)) == SIZE_MAX) {
            *rc = oom(r);
            return 1;
        }
    }
    int async = strncmp(p, "async_", 6) == 0;
    if (!async && strncmp(p, "thread_", 7) != 0) {
        return 0;
    }
    p += async ? 6 : 7;
    if (!key_u64(&p, '_', &tid)) {
        return 0;
    }
    if (strcmp(p, "recorded") != 0 && strcmp(p, "dropped") != 0 &&
        strcmp(p, "capacity_needed") != 0) {
        return 0;
    }
    size_t t = SIZE_MAX;
    if (async) {
        /* the async tracks are known by now (the metadata is read after the events) */
        for (size_t i = 0; i < r->m->thread_count && t == SIZE_MAX; i++) {
            const loupe_model_thread *th = &r->m->threads[i];
            t = th->kind == LOUPE_TRACK_ASYNC && th->process == process && th->tid == tid
                    ? i
                    : SIZE_MAX;
        }
        if (t == SIZE_MAX) {
            return 1; /* an async track without events: nothing to account to */
        }
    } else if ((t = thread_of(r, process, tid)) == SIZE_MAX) {
        *rc = oom(r);
        return 1;
    }
    loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
    uint64_t *field = strcmp(p, "recorded") == 0  ? &th->events_recorded
                      : strcmp(p, "dropped") == 0 ? &th->events_dropped
                                                  : &th->capacity_needed;
    *rc = meta_u64(r, key, v, field);
    return 1;
}

/* One metadata object ("otherData" first, then "metadata", which wins). loupe's keys (in a loupe
 * file) map onto the model; every other key goes to model->metadata. */
static int read_meta(reader *r, const loupe__jnode *obj, int *has_duration) {
    for (uint32_t i = obj->first; i != 0; i = r->q.nodes[i].next) {
        const loupe__jnode *v = &r->q.nodes[i];
        const char *key = v->key;
        int rc = 0;
        loupe_model *m = r->m;
        if (!r->loupe) {
            rc = loupe__mb_metadata(r->mb, key, meta_text(r, v));
        } else if (strcmp(key, "loupe_version") == 0 || strcmp(key, "events_recorded") == 0 ||
                   strcmp(key, "events_dropped") == 0 || strcmp(key, "truncated_zones") == 0) {
            /* the writer's, or sums the model derives from its threads and slices */
        } else if (strcmp(key, "clock") == 0) {
            m->clock = meta_text(r, v);
        } else if (strcmp(key, "host") == 0) {
            m->host = meta_text(r, v);
        } else if (strcmp(key, "tsc_ghz") == 0) {
            rc = meta_double(r, key, v, &m->tsc_ghz);
        } else if (strcmp(key, "origin_unix_ns") == 0) {
            rc = meta_u64(r, key, v, &m->origin_unix_ns);
        } else if (strcmp(key, "duration_ns") == 0) {
            rc = meta_u64(r, key, v, &m->duration_ns);
            *has_duration = 1;
        } else if (strcmp(key, "pid") == 0) {
            rc = meta_u64(r, key, v, &m->pid);
        } else if (strcmp(key, "unmatched_ends") == 0) {
            rc = meta_u64(r, key, v, &m->unmatched_ends);
        } else if (!meta_thread(r, key, v, &rc)) {
            rc = loupe__mb_metadata(r->mb, key, meta_text(r, v));
        }
        if (rc != 0) {
            return rc;
        }
        if (loupe__mb_failed(r->mb)) {
            return oom(r);
        }
    }
    return 0;
}

static int is_loupe_meta(const reader *r, const loupe__jnode *obj) {
    return obj != NULL && loupe__jp_get(&r->q, obj, "loupe_version") != NULL;
}

/* ---- the whole read ---- */

static void reader_free(reader *r) {
    for (size_t i = 0; i < r->ts_cap; i++) {
        free(r->ts[i].stack);
    }
    free(r->ts);
    free(r->hkey);
    free(r->hval);
    free(r->flows);
    free(r->pending);
    free(r->retids);
    free(r->args);
    free(r->dump);
    loupe__jp_free(&r->p);
    loupe__jp_free(&r->q);
}

static size_t find_process(const loupe_model *m, uint64_t pid) {
    for (size_t i = 0; i < m->process_count; i++) {
        if (m->processes[i].pid == pid) {
            return i;
        }
    }
    return SIZE_MAX;
}

static size_t find_tid(const loupe_model *m, uint64_t tid) {
    for (size_t i = 0; i < m->thread_count; i++) {
        if (m->threads[i].kind == LOUPE_TRACK_THREAD && m->threads[i].tid == tid) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* M events without a tid name the thread (pid, pid) and the process pid, unless pid is no
 * process but another process's tid: uftrace writes {"ph":"M","pid":<tid>} for its threads
 * (names both ways, "[25898] mt"), and the events of that tid carry the real pid. Such a name goes
 * to that thread, and no process is made of the tid. */
static int apply_pending(reader *r) {
    loupe_model *m = r->m;
    for (size_t i = 0; i < r->pending_count; i++) {
        const pending_name *n = &r->pending[i];
        size_t p = find_process(m, n->pid);
        size_t t = p == SIZE_MAX ? find_tid(m, n->pid) : SIZE_MAX;
        if (t != SIZE_MAX) {
            if (n->thread && m->threads[t].name[0] == 0) {
                loupe__mb_thread_name(r->mb, t, n->name);
            }
            continue;
        }
        if (p == SIZE_MAX && (p = process_of(r, n->pid)) == SIZE_MAX) {
            return oom(r);
        }
        if (!n->thread) {
            loupe__mb_process_at(r->mb, p)->name = n->name;
        } else if ((t = thread_of(r, p, n->pid)) == SIZE_MAX) {
            return oom(r);
        } else if (m->threads[t].name[0] == 0) {
            loupe__mb_thread_name(r->mb, t, n->name);
        }
    }
    return 0;
}

/* After the last event: times made relative to the origin, B still open closed, the metadata
 * ("otherData" then "metadata", which wins), flows, the duration, the warnings. */
static int finish_model(reader *r, const loupe__jnode *meta, const loupe__jnode *other) {
    loupe_model *m = r->m;
    int rc;
    meta = meta != NULL && meta->type == LOUPE__J_OBJ ? meta : NULL;
    other = other != NULL && other->type == LOUPE__J_OBJ ? other : NULL;
    r->loupe = is_loupe_meta(r, meta) || is_loupe_meta(r, other);
    /* A loupe file's ts are relative to its origin already; anything else starts at 0. */
    r->origin_ns = r->have_time && !r->loupe ? r->min_ns : 0;
    uint64_t o = (uint64_t)r->origin_ns;
    for (size_t t = 0; t < m->thread_count; t++) {
        loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
        tstate *st = &r->ts[t];
        for (size_t k = 0; k < st->depth; k++) {
            loupe_slice *sl = &th->slices[st->stack[k].slice];
            sl->dur_ns = (uint64_t)(r->max_ns - st->stack[k].start_ns);
            sl->flags |= LOUPE_SLICE_TRUNCATED;
        }
        for (size_t i = 0; i < th->slice_count; i++) {
            th->slices[i].start_ns -= o;
        }
        for (size_t i = 0; i < th->instant_count; i++) {
            th->instants[i].ts_ns -= o;
        }
        if (!r->loupe) {
            th->events_recorded = st->events;
        }
    }
    for (size_t i = 0; i < m->counter_count; i++) {
        m->counters[i].ts_ns -= o;
    }
    if ((rc = apply_pending(r)) != 0) {
        return rc;
    }
    if ((rc = read_samples(r, o)) != 0) {
        return rc;
    }
    int has_duration = 0;
    if (other != NULL && (rc = read_meta(r, other, &has_duration)) != 0) {
        return rc;
    }
    if (meta != NULL && (rc = read_meta(r, meta, &has_duration)) != 0) {
        return rc;
    }
    /* processes[0] (the first pid seen) is the model's own process. */
    if (m->process_count > 0) {
        if (!r->loupe || m->pid == 0) {
            m->pid = m->processes[0].pid;
        }
        m->process_name = m->processes[0].name;
    }
    if ((rc = link_flows(r)) != 0) {
        return rc;
    }
    m->unmatched_ends += r->unmatched;
    if (!has_duration && r->have_time) {
        m->duration_ns = (uint64_t)r->max_ns - (uint64_t)r->min_ns;
    }
    if (r->bad_time > 0) {
        loupe__mb_warn(r->mb,
                       "%s: %llu event%s excluded: a negative ts, or a ts, dur or end beyond "
                       "2^62 ns (the first: event %zu, %s)",
                       r->path, (unsigned long long)r->bad_time, r->bad_time > 1 ? "s" : "",
                       r->bad_time_first, r->bad_time_text);
    }
    if (r->neg_dur > 0) {
        loupe__mb_warn(
            r->mb, "%s: %llu X event%s with a negative dur skipped (the first: event %zu)", r->path,
            (unsigned long long)r->neg_dur, r->neg_dur > 1 ? "s" : "", r->neg_dur_first);
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* The walk's outcome besides 0 and an error: the input ended early (a warning was added). */
#define CUT 1

/* ---- the window: the text arrives in pieces (read.c's gzip stream) ----
 * The parser works on r->p.t[0..r->p.n), a window onto the text. Before a value is parsed, its
 * end is found in the window (value_span), refilling it when needed: the bytes before the cursor
 * are dropped (every string an event gives the model was interned into it already), the rest
 * moved to the front, more read after it; the window doubles only for a value larger than it.
 * So memory holds one window (WINDOW bytes, or the largest value) and the model. */
#define WINDOW ((size_t)4 << 20)

/* Notes where the newlines of window bytes [from, to) are, before the parser decodes strings
 * in place (a "\n" escape becomes a newline byte): errors and warnings give the line of the
 * text as it was. */
static int note_newlines(reader *r, size_t from, size_t to) {
    const char *t = r->p.t;
    for (const char *q = t + from, *end = t + to; (q = memchr(q, '\n', (size_t)(end - q))) != NULL;
         q++) {
        if (loupe__grow((void **)&r->nl, &r->nl_cap, r->nl_count + 1, sizeof(*r->nl)) != 0) {
            return -1;
        }
        r->nl[r->nl_count++] = r->base + (size_t)(q - t);
    }
    return 0;
}

/* Drops the bytes before the cursor and reads more; eof once the source has nothing more. A
 * failure is kept in r->io_rc (and ends the input). */
static void refill(reader *r) {
    loupe__jp *p = &r->p;
    if (r->eof) {
        return;
    }
    size_t keep = p->i;
    /* the newlines before the cut leave the window */
    size_t k = 0;
    while (k < r->nl_count && r->nl[k] < r->base + keep) {
        k++;
    }
    if (k > 0) {
        r->lines_before += k;
        r->line_start = r->nl[k - 1] + 1;
        memmove(r->nl, r->nl + k, (r->nl_count - k) * sizeof(*r->nl));
        r->nl_count -= k;
    }
    memmove(p->t, p->t + keep, p->n - keep);
    p->n -= keep;
    r->base += keep;
    p->i = 0;
    if (p->n + 1 >= r->cap) {
        size_t nc = r->cap * 2;
        char *nb = nc > r->cap ? realloc(p->t, nc) : NULL;
        if (nb == NULL) {
            r->io_rc =
                loupe__err(LOUPE_ENOMEM, "out of memory reading %s (%zu bytes)", r->path, nc);
            r->eof = 1;
            return;
        }
        p->t = nb;
        r->cap = nc;
    }
    size_t want = r->cap < WINDOW ? WINDOW : r->cap;
    if (want > r->cap) {
        char *nb = realloc(p->t, want);
        if (nb != NULL) {
            p->t = nb;
            r->cap = want;
        }
    }
    size_t got = 0;
    int rc = r->more(r->ctx, p->t + p->n, r->cap - p->n - 1, &got);
    if (rc != 0) {
        r->io_rc = rc;
        r->eof = 1;
        return;
    }
    r->eof = got == 0;
    if (note_newlines(r, p->n, p->n + got) != 0) {
        r->io_rc = oom(r);
        r->eof = 1;
    }
    p->n += got;
    p->t[p->n] = 0;
}

/* The next byte after blanks (refilling), -1 at the end of the input. */
static int peek(reader *r) {
    for (;;) {
        int c = loupe__jp_peek(&r->p);
        if (c >= 0 || r->eof) {
            return c;
        }
        refill(r);
    }
}

/* The end of the value at the cursor in the window (brackets and quotes matched, a scalar up
 * to its delimiter), SIZE_MAX when the window ends first. Validates nothing: the parser does. */
static size_t value_end(const loupe__jp *p) {
    const char *t = p->t;
    size_t i = p->i, n = p->n, depth = 0;
    char c = t[i];
    if (c == '"' || c == '{' || c == '[') {
        for (; i < n; i++) {
            c = t[i];
            if (c == '"') {
                for (i++; i < n && t[i] != '"'; i++) {
                    i += t[i] == '\\';
                }
                if (i >= n) {
                    return SIZE_MAX;
                }
                if (depth == 0) {
                    return i + 1;
                }
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                return i + 1;
            }
        }
        return SIZE_MAX;
    }
    while (i < n && !is_space(t[i]) && t[i] != ',' && t[i] != ']' && t[i] != '}') {
        i++;
    }
    return i < n ? i : SIZE_MAX;
}

/* Makes the whole value at the cursor lie in the window, refilling it; its end, or SIZE_MAX
 * when the input ends first (the parser then says where). */
static size_t value_span(reader *r) {
    for (;;) {
        size_t e = value_end(&r->p);
        if (e != SIZE_MAX || r->eof) {
            return e;
        }
        refill(r);
    }
}

/* Parses the value at the cursor into r->p (reset first). A value the window cuts is parsed
 * again once it holds all of it: the bytes its strings decoded over are put back, the window
 * refilled from the value's start (and grown, for a value larger than it). */
static int parse_here(reader *r, uint32_t *root, size_t *start) {
    loupe__jp *p = &r->p;
    for (;;) {
        *start = p->i;
        loupe__jp_reset(p);
        int prc = loupe__jp_value(p, root);
        if (prc != LOUPE__JSON_EOF || r->eof) {
            return prc;
        }
        loupe__jp_undo(p, *start);
        p->i = *start;
        refill(r);
    }
}

/* The absolute offset of window offset off, with its 1-based line and column. */
static void where(const reader *r, size_t off, size_t *abs, size_t *line, size_t *col) {
    *abs = r->base + off;
    size_t lo = 0, hi = r->nl_count; /* the newlines before abs */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->nl[mid] < *abs) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    size_t start = lo > 0 ? r->nl[lo - 1] + 1 : r->line_start;
    *line = r->lines_before + lo + 1;
    *col = *abs - start + 1;
}

static int syntax_error(reader *r, const char *at) {
    size_t abs, line, col;
    where(r, r->p.err_at, &abs, &line, &col);
    return loupe__err(LOUPE_EFORMAT, "%s: line %zu column %zu%s: %s", r->path, line, col, at,
                      r->p.err_what);
}

/* A parse failure: out of memory, a syntax error, or (EOF) the input ending early. */
static int parse_failed(reader *r, int prc, const char *at) {
    if (prc == LOUPE__JSON_NOMEM) {
        return oom(r);
    }
    return prc == LOUPE__JSON_EOF ? CUT : syntax_error(r, at);
}

/* ---- the fast path for loupe's own X events ---- */

/* Matches the literal lit at *q (before end); advances past it. */
static int fx_lit(const char **q, const char *end, const char *lit, size_t len) {
    if ((size_t)(end - *q) < len || memcmp(*q, lit, len) != 0) {
        return 0;
    }
    *q += len;
    return 1;
}

/* An unsigned integer of 1 to 18 digits without a leading zero (so that it fits and means what
 * the general parser would read). */
static int fx_uint(const char **q, const char *end, uint64_t *out) {
    const char *s = *q;
    uint64_t v = 0;
    while (s < end && is_digit(*s) && s - *q < 19) {
        v = v * 10 + (uint64_t)(*s - '0');
        s++;
    }
    size_t n = (size_t)(s - *q);
    if (n == 0 || n > 18 || (n > 1 && **q == '0')) {
        return 0;
    }
    *q = s;
    *out = v;
    return 1;
}

/* A time as loupe's writer prints it, µs with exactly 3 decimals ("2686.060"): ns exactly.
 * At most 15 integer digits: below 1e18 ns, so that ts + dur stays far below NS_LIMIT. */
static int fx_us3(const char **q, const char *end, int64_t *out) {
    uint64_t us;
    const char *s = *q;
    if (!fx_uint(&s, end, &us) || s - *q > 15 || end - s < 4 || s[0] != '.' || !is_digit(s[1]) ||
        !is_digit(s[2]) || !is_digit(s[3])) {
        return 0;
    }
    *out = (int64_t)(us * 1000u + (uint64_t)(s[1] - '0') * 100u + (uint64_t)(s[2] - '0') * 10u +
                     (uint64_t)(s[3] - '0'));
    *q = s + 4;
    return 1;
}

/* The event at the cursor when it has exactly the shape of loupe's writer's complete event
 * without arguments, {"ph":"X","pid":P,"tid":T,"ts":U.UUU,"dur":U.UUU,"name":"N"} (N without
 * escapes or control bytes) and lies whole in the window: added to the model as
 * process_event() would add it, without building the event's nodes. Returns 1 when it was
 * (the cursor after it), 0 when the event is anything else (nothing read: process_event()
 * reads it), or an error code. Such events are nearly all of a loupe trace (its zones without
 * arguments); every other event, other writers' included, takes the general path. */
static int fast_x(reader *r) {
    loupe__jp *p = &r->p;
    const char *q = p->t + p->i, *end = p->t + p->n;
    uint64_t pid, tid;
    int64_t ts, dur;
    if (!fx_lit(&q, end, "{\"ph\":\"X\",\"pid\":", 16) || !fx_uint(&q, end, &pid) ||
        !fx_lit(&q, end, ",\"tid\":", 7) || !fx_uint(&q, end, &tid) ||
        !fx_lit(&q, end, ",\"ts\":", 6) || !fx_us3(&q, end, &ts) ||
        !fx_lit(&q, end, ",\"dur\":", 7) || !fx_us3(&q, end, &dur) ||
        !fx_lit(&q, end, ",\"name\":\"", 9)) {
        return 0;
    }
    const char *name = q;
    while (q < end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) {
        q++;
    }
    if (end - q < 2 || q[0] != '"' || q[1] != '}') {
        return 0;
    }
    size_t name_len = (size_t)(q - name);
    q += 2;
    /* event_thread(): tid 0 is the pid's thread */
    if (tid == 0) {
        tid = pid;
    }
    size_t t;
    if (r->fx_have && r->fx_pid == pid && r->fx_tid == tid) {
        t = r->fx_track;
    } else {
        uint32_t device;
        int gpu = gpu_track(pid, tid, &device);
        size_t pr = gpu ? 0 : process_of(r, pid);
        t = pr == SIZE_MAX ? SIZE_MAX : thread_of(r, pr, tid);
        if (t == SIZE_MAX) {
            return oom(r);
        }
        if (gpu) {
            loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
            th->kind = LOUPE_TRACK_GPU;
            th->device = device;
        }
        r->fx_have = 1;
        r->fx_pid = pid;
        r->fx_tid = tid;
        r->fx_track = t;
    }
    /* process_event()'s span of the trace */
    if (!r->have_time || ts < r->min_ns) {
        r->min_ns = ts;
    }
    if (!r->have_time || ts + dur > r->max_ns) {
        r->max_ns = ts + dur;
    }
    r->have_time = 1;
    /* do_slice() */
    r->ts[t].events++;
    size_t si = loupe__mb_slice(r->mb, t);
    if (si == SIZE_MAX) {
        return oom(r);
    }
    if (r->fx_name == NULL || r->fx_name_len != name_len ||
        memcmp(r->fx_name, name, name_len) != 0) {
        r->fx_name = loupe__mb_strn(r->mb, name, name_len);
        r->fx_name_len = name_len;
    }
    if (r->fx_empty == NULL) {
        r->fx_empty = loupe__mb_str(r->mb, "");
    }
    loupe_slice *sl = loupe__mb_slice_at(r->mb, t, si);
    sl->start_ns = (uint64_t)ts; /* absolute until finish_model */
    sl->dur_ns = (uint64_t)dur;
    sl->name = r->fx_name; /* the category stays none: loupe__mb_slice() zeroed it */
    p->i = (size_t)(q - p->t);
    return 1;
}

/* The events array at the cursor ('['); *idx counts events over every traceEvents array. */
static int walk_events(reader *r, size_t *idx) {
    loupe__jp *p = &r->p;
    size_t open_abs, open_line, open_col, first = *idx;
    where(r, p->i, &open_abs, &open_line, &open_col);
    p->i++;
    for (;;) {
        int c = peek(r);
        if (c == ']') {
            p->i++;
            return 0;
        }
        if (c < 0) {
            break;
        }
        int fx = fast_x(r);
        if (fx < 0) {
            return fx;
        }
        if (fx == 0) {
            uint32_t root;
            size_t start;
            int prc = parse_here(r, &root, &start);
            if (prc != 0) {
                char at[48];
                snprintf(at, sizeof at, " (event %zu)", *idx);
                int rc = parse_failed(r, prc, at);
                if (rc != CUT) {
                    return rc;
                }
                size_t abs, line, col;
                where(r, start, &abs, &line, &col);
                loupe__mb_warn(r->mb,
                               "%s: line %zu column %zu: the input ends inside event %zu (%s): %zu "
                               "events read, the cut event (the last %zu bytes) dropped",
                               r->path, line, col, *idx, p->err_what, *idx - first, p->n - start);
                return CUT;
            }
            int rc = process_event(r, &p->nodes[root], *idx);
            if (rc != 0) {
                return rc;
            }
        }
        (*idx)++;
        c = peek(r);
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == ']') {
            p->i++;
            return 0;
        }
        if (c >= 0) {
            p->err_at = p->i;
            p->err_what = "',' or ']' expected after an event";
            return syntax_error(r, "");
        }
        break;
    }
    loupe__mb_warn(r->mb,
                   "%s: the events array (line %zu column %zu) is not closed: the input ends "
                   "after event %zu; %zu events read",
                   r->path, open_line, open_col, *idx - first, *idx - first);
    return CUT;
}

/* A copy of the value at the cursor (a metadata object), parsed by r->q: its nodes and strings
 * live to the end, whatever the window does. */
static int keep_value(reader *r, uint32_t *v) {
    loupe__jp *p = &r->p;
    size_t end = value_span(r);
    /* one byte past the value (its delimiter), so that a scalar ends before the copy does */
    size_t stop = end == SIZE_MAX || end >= p->n ? p->n : end + 1;
    size_t len = stop - p->i;
    char *copy = malloc(len + 1);
    if (copy == NULL ||
        loupe__grow((void **)&r->copies, &r->copies_cap, r->ncopies + 1, sizeof(char *)) != 0) {
        free(copy);
        return LOUPE__JSON_NOMEM;
    }
    memcpy(copy, p->t + p->i, len);
    copy[len] = 0;
    r->copies[r->ncopies++] = copy;
    loupe__jp *q = &r->q;
    q->t = copy;
    q->n = len;
    q->i = 0;
    int prc = loupe__jp_value(q, v);
    if (prc != 0) {
        p->err_at = p->i + q->err_at;
        p->err_what = q->err_what;
        if (prc == LOUPE__JSON_EOF && stop < p->n) {
            prc = LOUPE__JSON_SYNTAX;
        }
    }
    p->i += q->i;
    return prc;
}

/* The members of the top-level object at the cursor ('{'). */
static int walk_object(reader *r, size_t *idx, uint32_t *meta, uint32_t *other) {
    loupe__jp *p = &r->p;
    int seen_events = 0, c;
    p->i++;
    if ((c = peek(r)) == '}') {
        p->i++;
        goto done;
    }
    for (;;) {
        c = peek(r);
        size_t key_abs, key_line, key_col;
        where(r, p->i, &key_abs, &key_line, &key_col);
        loupe__jp_reset(p);
        uint32_t k;
        int prc;
        if (c == '"') {
            size_t start;
            prc = parse_here(r, &k, &start);
        } else {
            p->err_at = c < 0 ? p->n : p->i;
            p->err_what = "string expected (a key of the top-level object)";
            prc = c < 0 ? LOUPE__JSON_EOF : LOUPE__JSON_SYNTAX;
        }
        /* the key, before a refill moves the window */
        char key[16] = "";
        if (prc == 0) {
            snprintf(key, sizeof key, "%s", p->nodes[k].len < sizeof key ? p->nodes[k].s : "");
        }
        if (prc == 0 && (c = peek(r)) != ':') {
            p->err_at = c < 0 ? p->n : p->i;
            p->err_what = "':' expected";
            prc = c < 0 ? LOUPE__JSON_EOF : LOUPE__JSON_SYNTAX;
        }
        if (prc != 0) {
            int rc = parse_failed(r, prc, "");
            if (rc == CUT) {
                break;
            }
            return rc;
        }
        p->i++;
        c = peek(r);
        if (strcmp(key, "traceEvents") == 0 && c == '[') {
            if (seen_events) {
                loupe__mb_warn(r->mb,
                               "%s: line %zu column %zu: a second \"traceEvents\" key; its "
                               "events are read as well (from event %zu)",
                               r->path, key_line, key_col, *idx);
            }
            seen_events = 1;
            int rc = walk_events(r, idx);
            if (rc == CUT) {
                break;
            }
            if (rc != 0) {
                return rc;
            }
        } else if (c < 0) {
            break;
        } else {
            int is_meta = strcmp(key, "metadata") == 0, is_other = strcmp(key, "otherData") == 0;
            uint32_t v;
            prc = keep_value(r, &v);
            if (prc != 0) {
                int rc = parse_failed(r, prc, "");
                if (rc == CUT) {
                    break;
                }
                return rc;
            }
            if (strcmp(key, "traceEvents") == 0) {
                return loupe__err(LOUPE_EFORMAT, "%s: \"traceEvents\" is not an array (%s)",
                                  r->path, type_name(&r->q.nodes[v]));
            }
            if (is_meta) {
                *meta = v;
            } else if (is_other) {
                *other = v;
            } else if (strcmp(key, "stackFrames") == 0) {
                r->sf_v = v;
                r->has_sf = 1;
            } else if (strcmp(key, "samples") == 0) {
                r->smp_v = v;
                r->has_smp = 1;
            } else if (strcmp(key, "loupeSamples") == 0) {
                r->ls_v = v;
                r->has_ls = 1;
            }
        }
        c = peek(r);
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == '}') {
            p->i++;
            goto done;
        }
        if (c >= 0) {
            p->err_at = p->i;
            p->err_what = "',' or '}' expected";
            return syntax_error(r, "");
        }
        break;
    }
    /* The input ended inside the object: what was read stands. */
    loupe__mb_warn(r->mb,
                   "%s: the top-level object is not closed: the input ends at byte %zu; keys "
                   "after that point (\"metadata\", loss accounting) are lost",
                   r->path, r->base + p->n);
    return seen_events ? CUT
                       : loupe__err(LOUPE_EFORMAT,
                                    "%s: not a Chrome JSON trace (no traceEvents array)", r->path);
done:
    if (!seen_events) {
        return loupe__err(LOUPE_EFORMAT, "%s: not a Chrome JSON trace (no traceEvents array)",
                          r->path);
    }
    return 0;
}

static int read_text_json(reader *r) {
    loupe__jp *p = &r->p;
    uint32_t meta = UINT32_MAX, other = UINT32_MAX; /* indices into r->q.nodes */
    size_t idx = 0;
    int c = peek(r), rc;
    if (c == '[') {
        rc = walk_events(r, &idx);
    } else if (c == '{') {
        rc = walk_object(r, &idx, &meta, &other);
    } else {
        p->err_at = c < 0 ? p->n : p->i;
        p->err_what = "'[' or '{' expected (not a Chrome JSON trace)";
        rc = syntax_error(r, "");
    }
    if (rc == 0 && peek(r) >= 0) {
        p->err_at = p->i;
        p->err_what = "text after the end of the trace";
        rc = syntax_error(r, "");
    }
    if (r->io_rc != 0) {
        return r->io_rc; /* the source failed: whatever the walk made of its end */
    }
    if (rc != 0 && rc != CUT) {
        return rc;
    }
    return finish_model(r, meta != UINT32_MAX ? &r->q.nodes[meta] : NULL,
                        other != UINT32_MAX ? &r->q.nodes[other] : NULL);
}

int loupe__chrome_json_read_stream(const char *path, char *buf, size_t n, size_t cap,
                                   loupe__read_fn more, void *ctx, loupe_model **out) {
    *out = NULL;
    reader r;
    memset(&r, 0, sizeof(r));
    r.last_process = SIZE_MAX;
    r.path = path;
    /* A UTF-8 BOM: the window starts after it. */
    size_t skip = n >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    r.p.t = buf;
    r.p.n = n;
    r.p.i = skip;
    r.base = 0;
    r.cap = cap;
    r.more = more;
    r.ctx = ctx;
    r.eof = more == NULL;
    int rc = note_newlines(&r, 0, n) != 0 ? oom(&r) : 0;
    r.mb = rc == 0 ? loupe__mb_new() : NULL;
    if (r.mb == NULL) {
        rc = oom(&r);
    } else {
        r.m = loupe__mb_model(r.mb);
        rc = read_text_json(&r);
    }
    free(r.p.t);
    r.p.t = NULL;
    for (size_t i = 0; i < r.ncopies; i++) {
        free(r.copies[i]);
    }
    free(r.copies);
    free(r.nl);
    for (size_t i = 0; rc == 0 && i < r.retid_count; i++) {
        if (r.retids[i].thread < r.m->thread_count) {
            loupe__mb_thread_at(r.mb, r.retids[i].thread)->tid = r.retids[i].tid;
        }
    }
    reader_free(&r);
    if (rc != 0) {
        loupe__mb_abort(r.mb);
        return rc;
    }
    *out = loupe__mb_finish(r.mb);
    return *out != NULL ? 0 : oom(&r);
}

int loupe__chrome_json_read_mem(const char *path, char *buf, size_t n, loupe_model **out) {
    return loupe__chrome_json_read_stream(path, buf, n, n + 1, NULL, NULL, out);
}

/* ---- CPU samples: "stackFrames", "samples", "loupeSamples" ----
 *
 * stackFrames: {"<id>": {"name", "category", "parent", and loupe's "file", "line", "inlined",
 * "offset"}} becomes frames (function = name, module = category) and stack nodes; ids are any
 * strings (or numbers). A parent that is not in the dictionary, or a cycle, ends the stack there
 * (one warning). samples: [{"tid" (else "pid"), "ts" (µs), "cpu", "sf", "weight"}]: one model
 * sample per unit of an integer weight (absent: 1; at most 2^20 per entry), with the stack of
 * "sf" (none when absent or unknown: counted in a warning). An entry that is not an object, or
 * has no valid ts, is skipped and counted in a warning. loupeSamples restores the period, the
 * losses and the off-CPU intervals (loupe's own). */

typedef struct sf_entry {
    char key[32];
    const loupe__jnode *v;
    uint32_t node;   /* UINT32_MAX until resolved */
    uint32_t parent; /* index into the sorted entries, UINT32_MAX: none */
    int state;       /* 0 unresolved, 1 on the current path, 2 resolved */
} sf_entry;

static void node_key(const loupe__jnode *v, char *buf, size_t size) {
    if (v->type == LOUPE__J_STR) {
        snprintf(buf, size, "%s", v->s);
    } else if (v->type == LOUPE__J_NUM) {
        snprintf(buf, size, "%.*s", (int)(v->len < size ? v->len : size - 1), v->s);
    } else {
        buf[0] = 0;
    }
}

static int cmp_sf(const void *pa, const void *pb) {
    return strcmp(((const sf_entry *)pa)->key, ((const sf_entry *)pb)->key);
}

static uint32_t sf_find(const sf_entry *e, size_t n, const char *key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(e[mid].key, key);
        if (c == 0) {
            return (uint32_t)mid;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return UINT32_MAX;
}

static const char *member_str(reader *r, const loupe__jnode *obj, const char *key) {
    const loupe__jnode *v = loupe__jp_get(&r->q, obj, key);
    return v != NULL && v->type == LOUPE__J_STR ? loupe__mb_str(r->mb, v->s) : "";
}

static uint64_t member_u64(reader *r, const loupe__jnode *obj, const char *key, uint64_t dflt) {
    const loupe__jnode *v = loupe__jp_get(&r->q, obj, key);
    uint64_t out = dflt;
    if (v != NULL && v->type == LOUPE__J_NUM) {
        loupe__jp_u64(v, &out);
    } else if (v != NULL && v->type == LOUPE__J_STR) {
        str_u64(v->s, 0, &out);
    }
    return out;
}

/* Resolves entry i (and its callers) into stack nodes. */
static int sf_resolve(reader *r, sf_entry *e, size_t n, uint32_t i, uint64_t *cut) {
    uint32_t path[64];
    size_t depth = 0;
    uint32_t k = i;
    /* climb to a resolved caller (or the root), then build downwards; paths deeper than the
     * buffer are resolved in chunks, the deepest first */
    while (k != UINT32_MAX && e[k].state != 2) {
        if (e[k].state == 1) { /* a cycle: the stack ends here */
            (*cut)++;
            e[path[depth - 1]].parent = UINT32_MAX;
            break;
        }
        if (depth == 64) {
            int rc = sf_resolve(r, e, n, k, cut);
            if (rc != 0) {
                return rc;
            }
            break;
        }
        e[k].state = 1;
        path[depth++] = k;
        k = e[k].parent;
    }
    while (depth > 0) {
        sf_entry *x = &e[path[--depth]];
        const loupe__jnode *o = x->v;
        loupe_frame f = {member_str(r, o, "name"),
                         member_str(r, o, "file"),
                         (uint32_t)member_u64(r, o, "line", 0),
                         (uint32_t)member_u64(r, o, "inlined", 0),
                         member_str(r, o, "category"),
                         member_u64(r, o, "offset", 0)};
        uint32_t fi = loupe__mb_frame(r->mb, &f);
        uint32_t parent = x->parent != UINT32_MAX ? e[x->parent].node : UINT32_MAX;
        x->node = fi == UINT32_MAX ? UINT32_MAX : loupe__mb_stack(r->mb, parent, fi);
        x->state = 2;
        if (x->node == UINT32_MAX) {
            return oom(r);
        }
    }
    return 0;
}

static int read_samples(reader *r, uint64_t origin) {
    sf_entry *e = NULL;
    size_t n = 0;
    uint64_t cut = 0, bad = 0, unknown_sf = 0;
    int rc = 0;
    const loupe__jnode *sf = r->has_sf ? &r->q.nodes[r->sf_v] : NULL;
    if (sf != NULL && sf->type == LOUPE__J_OBJ && sf->count > 0) {
        e = calloc(sf->count, sizeof(*e));
        if (e == NULL) {
            return oom(r);
        }
        for (uint32_t c = sf->first; c != 0; c = r->q.nodes[c].next) {
            const loupe__jnode *v = &r->q.nodes[c];
            if (v->type != LOUPE__J_OBJ || n >= sf->count) {
                continue;
            }
            snprintf(e[n].key, sizeof e[n].key, "%s", v->key);
            e[n].v = v;
            e[n].node = UINT32_MAX;
            n++;
        }
        qsort(e, n, sizeof(*e), cmp_sf);
        for (size_t i = 0; i < n; i++) {
            const loupe__jnode *p = loupe__jp_get(&r->q, e[i].v, "parent");
            char key[32];
            e[i].parent = UINT32_MAX;
            if (p != NULL && p->type != LOUPE__J_NULL) {
                node_key(p, key, sizeof key);
                e[i].parent = sf_find(e, n, key);
                cut += e[i].parent == UINT32_MAX;
            }
        }
    }
    const loupe__jnode *smp = r->has_smp ? &r->q.nodes[r->smp_v] : NULL;
    size_t idx = 0;
    for (uint32_t c = smp != NULL && smp->type == LOUPE__J_ARR ? smp->first : 0; c != 0 && rc == 0;
         c = r->q.nodes[c].next, idx++) {
        const loupe__jnode *v = &r->q.nodes[c];
        const loupe__jnode *ts = v->type == LOUPE__J_OBJ ? loupe__jp_get(&r->q, v, "ts") : NULL;
        int64_t ns;
        if (ts == NULL || ts->type != LOUPE__J_NUM || !loupe__jp_scaled(ts, 3, NS_LIMIT, &ns) ||
            ns < 0 || (uint64_t)ns < origin) {
            bad++;
            continue;
        }
        uint64_t pid = member_u64(r, v, "pid", 0), tid = member_u64(r, v, "tid", 0);
        size_t proc = process_of(r, pid);
        size_t t = proc == SIZE_MAX ? SIZE_MAX : thread_of(r, proc, tid != 0 ? tid : pid);
        if (t == SIZE_MAX) {
            rc = oom(r);
            break;
        }
        uint32_t stack = UINT32_MAX;
        const loupe__jnode *s = loupe__jp_get(&r->q, v, "sf");
        if (s != NULL && s->type != LOUPE__J_NULL) {
            char key[32];
            node_key(s, key, sizeof key);
            uint32_t i = sf_find(e, n, key);
            if (i == UINT32_MAX) {
                unknown_sf++;
            } else {
                if (e[i].state != 2 && (rc = sf_resolve(r, e, n, i, &cut)) != 0) {
                    break;
                }
                stack = e[i].node;
            }
        }
        uint64_t cpu = member_u64(r, v, "cpu", UINT32_MAX);
        uint64_t weight = member_u64(r, v, "weight", 1);
        weight = weight > (1u << 20) ? (1u << 20) : weight;
        for (uint64_t w = 0; w < weight && rc == 0; w++) {
            if (loupe__mb_sample(r->mb, t, (uint64_t)ns - origin, stack,
                                 cpu > UINT32_MAX ? UINT32_MAX : (uint32_t)cpu) != 0) {
                rc = oom(r);
            }
        }
    }
    free(e);
    if (rc != 0) {
        return rc;
    }
    const loupe__jnode *ls = r->has_ls ? &r->q.nodes[r->ls_v] : NULL;
    if (ls != NULL && ls->type == LOUPE__J_OBJ) {
        r->m->sample_period_ns = member_u64(r, ls, "period_ns", 0);
        r->m->samples_lost = member_u64(r, ls, "lost", 0);
        const loupe__jnode *oc = loupe__jp_get(&r->q, ls, "off_cpu");
        for (uint32_t c = oc != NULL && oc->type == LOUPE__J_ARR ? oc->first : 0; c != 0;
             c = r->q.nodes[c].next) {
            const loupe__jnode *v = &r->q.nodes[c];
            if (v->type != LOUPE__J_OBJ) {
                continue;
            }
            /* "pid" since the model's processes; a file without it: the first process */
            const loupe__jnode *pn = loupe__jp_get(&r->q, v, "pid");
            size_t proc = pn != NULL ? process_of(r, member_u64(r, v, "pid", 0)) : 0;
            size_t t = proc == SIZE_MAX ? SIZE_MAX : thread_of(r, proc, member_u64(r, v, "tid", 0));
            /* "kind" since loupe told waiting from preempted; absent or unknown: unknown */
            const loupe__jnode *kn = loupe__jp_get(&r->q, v, "kind");
            unsigned kind = LOUPE_OFF_CPU_UNKNOWN;
            if (kn != NULL && kn->type == LOUPE__J_STR) {
                kind = strcmp(kn->s, "waiting") == 0     ? LOUPE_OFF_CPU_WAITING
                       : strcmp(kn->s, "preempted") == 0 ? LOUPE_OFF_CPU_PREEMPTED
                                                         : LOUPE_OFF_CPU_UNKNOWN;
            }
            if (t == SIZE_MAX || loupe__mb_off_cpu_kind(r->mb, t, member_u64(r, v, "start_ns", 0),
                                                        member_u64(r, v, "dur_ns", 0), kind) != 0) {
                return oom(r);
            }
        }
    }
    if (bad > 0 && loupe__mb_warn(r->mb,
                                  "%s: %llu entr%s of \"samples\" skipped: not an object, or no "
                                  "valid \"ts\"",
                                  r->path, (unsigned long long)bad, bad == 1 ? "y" : "ies") != 0) {
        return oom(r);
    }
    if (unknown_sf > 0 &&
        loupe__mb_warn(r->mb,
                       "%s: %llu sample%s name an \"sf\" that is not in \"stackFrames\"; kept "
                       "without a stack",
                       r->path, (unsigned long long)unknown_sf, unknown_sf == 1 ? "" : "s") != 0) {
        return oom(r);
    }
    if (cut > 0 && loupe__mb_warn(r->mb,
                                  "%s: %llu stack frame%s name a parent that is not in "
                                  "\"stackFrames\" (or a cycle); their stacks end there",
                                  r->path, (unsigned long long)cut, cut == 1 ? "" : "s") != 0) {
        return oom(r);
    }
    return 0;
}
