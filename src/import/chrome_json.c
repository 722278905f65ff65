/* chrome_json.c: the Chrome Trace Event JSON reader (loupe/reader.h) and loupe_trace_find().
 *
 * The whole file is read (gzip or plain, through zlib; at most 4 GiB once uncompressed). The
 * streaming path then walks the text itself and hands jansson one event at a time, so memory
 * holds the text and the model rather than a tree of the whole trace (about 16 times the text);
 * each event is built into the model (model/builder.h) with absolute times, and finish_model
 * makes them relative at the end. Anything the walk does not expect sends the file to the
 * whole-tree path (json_loadb on all of it), which reads valid files the same way and words
 * errors with jansson's line and column. The format: ../shared/reference/formats.md §1.
 *
 * What is read:
 * - Containers: {"traceEvents":[...]} (must be complete and valid) and [...]. An array that is not
 *   closed (a writer that crashed) keeps its complete events and drops an incomplete last one, as
 *   Perfetto does (catapult only trims a trailing ',': a superset); a closed array with a
 *   trailing ',' is accepted too. A UTF-8 BOM is skipped.
 * - Phases: X; B/E (a stack per thread: E closes the innermost open B whatever its name, and its
 *   args are merged into the slice; an E with no open B, or earlier than it, is ignored and
 *   counted in unmatched_ends; a B still open ends at the trace's last timestamp, flagged
 *   LOUPE_SLICE_TRUNCATED, as is a slice with the arg loupe_truncated: true, which loupe's writer
 *   adds); i/I; C (each numeric arg is a sample, numeric strings read as doubles); M
 *   process_name / thread_name; flows v2 (bind_id with flow_out / flow_in on X or B; integer
 *   ids, hex strings as Perfetto reads them, other strings hashed) and v1 (s / t / f keyed by
 *   (id, cat, name); s, t and f with bp "e" bind to the innermost slice enclosing ts, f else to
 *   the next slice to begin on the thread), ends chained in time order. Every other phase (async
 *   b/n/e, samples, objects, ...) and empty {} events are skipped.
 * - Time: ts/dur in µs, llround(x * 1000) ns (an integer is exact), numeric strings accepted
 *   as Perfetto does. Times are made relative to the smallest ts (M events excluded) unless the
 *   file is loupe's (a "loupe_version" key in "metadata" or "otherData"): its ts already are.
 * - Threads: one model thread per tid (B/E stacks too); an event with no tid (or tid 0, as
 *   Perfetto) uses its pid. A string pid/tid that is not a number becomes a hash and names the
 *   thread (Perfetto's hack). The process: the pid of the first timed event (loupe: metadata
 *   "pid"), named by the process_name of that pid, else the first process_name.
 * - Metadata: in a loupe file, loupe's keys map back onto the model's fields (see read_meta; the
 *   writer's sums events_recorded / events_dropped / truncated_zones are derived, not kept), any
 *   other key goes to model->metadata (non-string values as compact JSON). Other files: every key.
 * - Integers above INT64_MAX: jansson rejects them ("too big integer"), so on that error the
 *   event is parsed again with each such literal rewritten as a marker string; they come back as
 *   LOUPE_ARG_UINT64 (ids and tids too). Up to UINT64_MAX; beyond it the error stands.
 *
 * What is rejected (LOUPE_EFORMAT; "event N" is the 0-based index in traceEvents): anything
 * jansson rejects, with "line L column C: <jansson's text>" (NaN, Infinity, lone surrogates such
 * as \ud800, numbers out of range, nesting deeper than 2048, a truncated object form); no
 * traceEvents array; an event that is not an object or has no string "ph"; ts missing (except on
 * M) or not a number; |ts| or dur beyond 2^62 ns (146 years); X without dur; a negative dur; a
 * pid/tid that is neither a number nor a string; a name or cat that is not a string; a loupe
 * metadata number that does not parse; more than 4 GiB of text. Ignored without error: args that
 * are not an object (an arg whose value is null reads as the string "null"), counter args that are
 * not numbers, a bind_id without a direction, flow ends that pair with nothing.
 */
#include "base/array.h"
#include "base/error.h"
#include "base/hash.h"
#include "import/readers.h"
#include "model/builder.h"

#include <loupe/reader.h>

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define MAX_TEXT ((size_t)4 << 30)  /* 4 GiB: the most a trace may hold uncompressed */
#define TEXT_PAD 16                 /* room after the text for the ']' of a repaired array */
#define NS_LIMIT ((int64_t)1 << 62) /* |ts| and dur bound: differences stay within uint64 */

/* An integer literal above INT64_MAX becomes the JSON string "\u0000loupe-u64:<digits>". */
static const char U64_MARK[] = "\0loupe-u64:";
#define U64_MARK_LEN (sizeof(U64_MARK) - 1)
#define U64_MARK_JSON "\"\\u0000loupe-u64:"

/* ---- reading the file ---- */

static int read_text(const char *path, char **out, size_t *out_len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(EISDIR));
    }
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        return loupe__err(e ? LOUPE_EIO : LOUPE_ENOMEM, "%s: %s", path,
                          e ? strerror(e) : "out of memory opening it");
    }
    gzbuffer(f, 1u << 18);
    size_t cap = 1u << 16;
    if (gzdirect(f) && S_ISREG(st.st_mode)) {
        if ((uint64_t)st.st_size > MAX_TEXT) {
            gzclose(f);
            return loupe__err(LOUPE_EFORMAT,
                              "%s: the file holds %llu bytes; loupe reads traces of at most 4 GiB",
                              path, (unsigned long long)st.st_size);
        }
        cap = (size_t)st.st_size + TEXT_PAD + 1;
    }
    char *buf = malloc(cap);
    if (buf == NULL) {
        gzclose(f);
        return loupe__err(LOUPE_ENOMEM, "%s: cannot allocate %zu bytes", path, cap);
    }
    size_t n = 0;
    for (;;) {
        if (n > MAX_TEXT) {
            free(buf);
            gzclose(f);
            return loupe__err(LOUPE_EFORMAT,
                              "%s: more than 4 GiB once uncompressed; loupe reads traces of at "
                              "most 4 GiB",
                              path);
        }
        size_t room = cap - TEXT_PAD - n;
        if (room == 0) {
            size_t nc = cap * 2 > MAX_TEXT + 1 + TEXT_PAD ? MAX_TEXT + 1 + TEXT_PAD : cap * 2;
            char *nb = realloc(buf, nc);
            if (nb == NULL) {
                free(buf);
                gzclose(f);
                return loupe__err(LOUPE_ENOMEM, "%s: cannot allocate %zu bytes", path, nc);
            }
            buf = nb;
            cap = nc;
            continue;
        }
        if (room > (1u << 30)) {
            room = 1u << 30;
        }
        errno = 0;
        int r = gzread(f, buf + n, (unsigned)room);
        if (r < 0) {
            int e = errno, zerr = 0;
            const char *msg = gzerror(f, &zerr);
            int code = zerr == Z_ERRNO       ? LOUPE_EIO
                       : zerr == Z_MEM_ERROR ? LOUPE_ENOMEM
                                             : LOUPE_EFORMAT;
            if (zerr == Z_ERRNO) {
                loupe__err(code, "%s: %s", path, strerror(e));
            } else {
                loupe__err(code, "%s: gzip: %s", path, msg);
            }
            free(buf);
            gzclose(f);
            return code;
        }
        if (r == 0) {
            break;
        }
        n += (size_t)r;
    }
    /* A gzip stream cut short reads as an early end; zlib only says so here. */
    int zerr = Z_OK;
    const char *zmsg = gzerror(f, &zerr);
    if (zerr == Z_BUF_ERROR) {
        loupe__err(LOUPE_EFORMAT, "%s: gzip: %s (the file is truncated)", path, zmsg);
        free(buf);
        gzclose(f);
        return LOUPE_EFORMAT;
    }
    gzclose(f);
    buf[n] = 0;
    *out = buf;
    *out_len = n;
    return 0;
}

/* ---- text fix-ups before and after a failed parse ---- */

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}
static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Is the all-digit literal s[0..n) above INT64_MAX and at most UINT64_MAX? */
static int is_big_u64(const char *s, size_t n) {
    while (n > 1 && *s == '0') {
        s++;
        n--;
    }
    if (n != 19 && n != 20) {
        return 0;
    }
    if (n == 19) {
        return memcmp(s, "9223372036854775807", 19) > 0;
    }
    return memcmp(s, "18446744073709551615", 20) <= 0;
}

/* Rewrites each integer literal in (INT64_MAX, UINT64_MAX] outside strings into a marker string.
 * Two scans: the first sizes the result. NULL when nothing changed or on out-of-memory (*oom). */
static char *rewrite_big_ints(const char *t, size_t n, size_t *out_n, int *oom) {
    const size_t extra = sizeof(U64_MARK_JSON) - 1 + 1; /* the marker's prefix and closing quote */
    char *out = NULL;
    size_t o = 0, need = 0;
    for (int pass = 0; pass < 2; pass++) {
        int in_str = 0;
        size_t count = 0;
        for (size_t i = 0; i < n;) {
            char c = t[i];
            if (in_str) {
                if (c == '\\') {
                    if (out) {
                        out[o++] = c;
                    }
                    i++;
                    if (i < n && out) {
                        out[o++] = t[i];
                    }
                    i++;
                    continue;
                }
                if (c == '"') {
                    in_str = 0;
                }
            } else if (c == '"') {
                in_str = 1;
            } else if (is_digit(c) || c == '-') {
                size_t j = i + 1;
                int all_digits = is_digit(c);
                while (j < n && (is_digit(t[j]) || t[j] == '.' || t[j] == 'e' || t[j] == 'E' ||
                                 t[j] == '+' || t[j] == '-')) {
                    all_digits &= is_digit(t[j]);
                    j++;
                }
                if (all_digits && is_big_u64(t + i, j - i)) {
                    count++;
                    if (out) {
                        memcpy(out + o, U64_MARK_JSON, sizeof(U64_MARK_JSON) - 1);
                        o += sizeof(U64_MARK_JSON) - 1;
                        memcpy(out + o, t + i, j - i);
                        o += j - i;
                        out[o++] = '"';
                    }
                } else if (out) {
                    memcpy(out + o, t + i, j - i);
                    o += j - i;
                }
                i = j;
                continue;
            }
            if (out) {
                out[o++] = c;
            }
            i++;
        }
        if (pass == 0) {
            if (count == 0) {
                return NULL;
            }
            need = n + count * extra;
            out = malloc(need + TEXT_PAD + 1);
            if (out == NULL) {
                *oom = 1;
                return NULL;
            }
        }
    }
    out[o] = 0;
    *out_n = o;
    return out;
}

/* For an array-form text: the length to keep so that appending ']' closes it after its last
 * complete element, when the array is not closed or ends with a trailing ','; 0 when no repair
 * applies. t starts at the '['. */
static size_t repair_len(const char *t, size_t n) {
    long depth = 0;
    int in_str = 0;
    size_t last_end = 1; /* just after '[': an empty array if no element is complete */
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_str) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_str = 0;
            }
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
            if (depth < 0) {
                return 0;
            }
            if (depth == 1) {
                last_end = i + 1;
            } else if (depth == 0) {
                /* Closed: a repair only for a trailing comma before the ']'. */
                int commas = 0;
                for (size_t k = last_end; k < i; k++) {
                    if (t[k] == ',') {
                        commas++;
                    } else if (!is_space(t[k])) {
                        return 0;
                    }
                }
                return commas == 1 ? last_end : 0;
            }
        }
    }
    return last_end;
}

/* ---- the reader's state ---- */

typedef struct open_b {
    size_t slice;
    int64_t start_ns; /* absolute (file) time */
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

typedef struct pid_name {
    uint64_t pid;
    const char *name;
} pid_name;

typedef struct reader {
    const char *path;
    loupe__mb *mb;
    loupe_model *m;
    int big_ints; /* the text was rewritten: marker strings are uint64 literals */
    int loupe;    /* the file is loupe's (metadata loupe_version) */
    /* tid -> thread index: open addressing, value index+1 (0 = empty) */
    uint64_t *hkey;
    size_t *hval;
    size_t hcap, hcount;
    tstate *ts;
    size_t ts_cap;
    flow_end *flows;
    size_t flow_count, flow_cap;
    loupe_arg *args;
    size_t args_cap;
    /* the span of the trace (absolute ns) and its first pid, found as events are read */
    int have_time;
    int64_t min_ns, max_ns;
    int have_pid;
    uint64_t first_pid;
    int64_t origin_ns; /* subtracted from every time at the end (finish_model) */
    /* process_name per pid: the model's pid is known only at the end */
    pid_name *pnames;
    size_t pname_count, pname_cap;
    uint64_t unmatched;
} reader;

static int oom(reader *r) {
    return loupe__err(LOUPE_ENOMEM, "%s: out of memory", r->path);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* The model thread for tid (created when missing); SIZE_MAX on out-of-memory. */
static size_t thread_of(reader *r, uint64_t tid) {
    if (r->hcount * 2 >= r->hcap) {
        size_t nc = r->hcap ? r->hcap * 2 : 64;
        uint64_t *nk = calloc(nc, sizeof(*nk));
        size_t *nv = calloc(nc, sizeof(*nv));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            return SIZE_MAX;
        }
        for (size_t i = 0; i < r->hcap; i++) {
            if (r->hval[i] != 0) {
                size_t j = (size_t)hash_u64(r->hkey[i]) & (nc - 1);
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
    size_t j = (size_t)hash_u64(tid) & (r->hcap - 1);
    while (r->hval[j] != 0) {
        if (r->hkey[j] == tid) {
            return r->hval[j] - 1;
        }
        j = (j + 1) & (r->hcap - 1);
    }
    size_t t = loupe__mb_thread(r->mb, tid);
    if (t == SIZE_MAX || loupe__grow((void **)&r->ts, &r->ts_cap, t + 1, sizeof(tstate)) != 0) {
        return SIZE_MAX;
    }
    r->hkey[j] = tid;
    r->hval[j] = t + 1;
    r->hcount++;
    return t;
}

/* ---- field helpers ---- */

/* A marker string's value (see rewrite_big_ints). */
static int marker_u64(const reader *r, const json_t *v, uint64_t *out) {
    if (!r->big_ints || !json_is_string(v) || json_string_length(v) <= U64_MARK_LEN ||
        memcmp(json_string_value(v), U64_MARK, U64_MARK_LEN) != 0) {
        return 0;
    }
    *out = strtoull(json_string_value(v) + U64_MARK_LEN, NULL, 10);
    return 1;
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

/* A time field (µs) in ns. Sets *present; errors name the event and the field. */
static int get_ns(reader *r, const json_t *ev, size_t idx, const char *field, int64_t *out,
                  int *present) {
    const json_t *v = json_object_get(ev, field);
    *present = v != NULL && !json_is_null(v);
    if (!*present) {
        return 0;
    }
    double d;
    uint64_t u;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i >= NS_LIMIT / 1000 || i <= -NS_LIMIT / 1000) {
            goto range;
        }
        *out = (int64_t)i * 1000;
        return 0;
    }
    if (json_is_real(v)) {
        d = json_real_value(v);
    } else if (marker_u64(r, v, &u)) {
        goto range;
    } else if (json_is_string(v)) {
        if (!str_double(json_string_value(v), &d)) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a number (\"%.40s\")",
                              r->path, idx, field, json_string_value(v));
        }
    } else {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a number", r->path, idx, field);
    }
    if (!isfinite(d) || fabs(d) * 1000.0 >= (double)NS_LIMIT) {
        goto range;
    }
    *out = (int64_t)llround(d * 1000.0);
    return 0;
range:
    return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is out of range (beyond 2^62 ns)", r->path,
                      idx, field);
}

/* A pid / tid / id: integers (negative ones wrap), integral reals, numeric strings (base),
 * other strings hashed (*str_out is then the string, when str_out != NULL). -1 when it is of
 * no usable type. */
static int get_id(const reader *r, const json_t *v, int base, uint64_t *out, const char **str_out) {
    double d;
    if (str_out != NULL) {
        *str_out = NULL;
    }
    if (json_is_integer(v)) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        d = json_real_value(v);
        if (d != floor(d) || fabs(d) >= 9.2e18) {
            return -1;
        }
        *out = (uint64_t)(int64_t)d;
        return 0;
    }
    if (marker_u64(r, v, out)) {
        return 0;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (str_u64(s, base, out)) {
            return 0;
        }
        *out = loupe__hash_bytes(s, strlen(s));
        if (str_out != NULL) {
            *str_out = s;
        }
        return 0;
    }
    return -1;
}

/* A string field: "" when absent; error when present and not a string. */
static int get_str(reader *r, const json_t *ev, size_t idx, const char *field, const char **out) {
    const json_t *v = json_object_get(ev, field);
    *out = "";
    if (v == NULL || json_is_null(v)) {
        return 0;
    }
    if (!json_is_string(v)) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: %s is not a string", r->path, idx, field);
    }
    *out = json_string_value(v);
    return 0;
}

/* Compact JSON of any value, interned into the model. */
static const char *json_text(reader *r, const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s == NULL) {
        return NULL;
    }
    const char *i = loupe__mb_str(r->mb, s);
    free(s);
    return i;
}

/* Converts an args object into r->args; *n entries. Non-objects give no args. */
static int conv_args(reader *r, const json_t *args, uint32_t *n) {
    *n = 0;
    if (!json_is_object(args)) {
        return 0;
    }
    size_t count = json_object_size(args);
    if (count > UINT32_MAX) {
        count = UINT32_MAX;
    }
    if (loupe__grow((void **)&r->args, &r->args_cap, count, sizeof(loupe_arg)) != 0) {
        return oom(r);
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)args, key, v) {
        if (*n == count) {
            break;
        }
        loupe_arg *a = &r->args[(*n)++];
        memset(a, 0, sizeof(*a));
        a->key = key;
        if (json_is_integer(v)) {
            a->type = LOUPE_ARG_INT64;
            a->v.i = (int64_t)json_integer_value(v);
        } else if (marker_u64(r, v, &a->v.u)) {
            a->type = LOUPE_ARG_UINT64;
        } else if (json_is_real(v)) {
            a->type = LOUPE_ARG_DOUBLE;
            a->v.d = json_real_value(v);
        } else if (json_is_boolean(v)) {
            a->type = LOUPE_ARG_BOOL;
            a->v.b = json_is_true(v);
        } else if (json_is_string(v)) {
            a->type = LOUPE_ARG_STRING;
            a->v.s = json_string_value(v);
        } else {
            a->type = LOUPE_ARG_STRING;
            a->v.s = json_text(r, v);
            if (a->v.s == NULL) {
                return oom(r);
            }
        }
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* The thread an event belongs to: tid, or pid when tid is absent or 0. */
static int event_thread(reader *r, const json_t *ev, size_t idx, size_t *out) {
    const json_t *tv = json_object_get(ev, "tid");
    const json_t *pv = json_object_get(ev, "pid");
    uint64_t tid = 0, pid = 0;
    const char *tname = NULL, *pname = NULL;
    if (tv != NULL && !json_is_null(tv) && get_id(r, tv, 10, &tid, &tname) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: tid is not an integer", r->path, idx);
    }
    if (pv != NULL && !json_is_null(pv) && get_id(r, pv, 10, &pid, &pname) != 0) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer", r->path, idx);
    }
    if (tid == 0) {
        tid = pid;
        tname = pname;
    }
    size_t t = thread_of(r, tid);
    if (t == SIZE_MAX) {
        return oom(r);
    }
    if (tname != NULL && loupe__mb_thread_at(r->mb, t)->name[0] == 0) {
        loupe__mb_thread_name(r->mb, t, tname);
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

/* Records a flow v2 end (bind_id with flow_in / flow_out) of a slice. */
static int flow_v2_end(reader *r, const json_t *ev, size_t t, size_t slice, int64_t start,
                       size_t idx) {
    const json_t *b = json_object_get(ev, "bind_id");
    int in = json_is_true(json_object_get(ev, "flow_in"));
    int out = json_is_true(json_object_get(ev, "flow_out"));
    uint64_t id;
    if (b == NULL || (!in && !out) || get_id(r, b, 16, &id, NULL) != 0) {
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
static int flow_v1_end(reader *r, const json_t *ev, size_t idx, char ph, int64_t ts) {
    uint64_t id;
    const char *cat, *name;
    size_t t;
    int rc;
    const json_t *iv = json_object_get(ev, "id");
    if (iv == NULL || get_id(r, iv, 16, &id, NULL) != 0) {
        return 0; /* no usable id: nothing to pair it with */
    }
    if ((rc = get_str(r, ev, idx, "cat", &cat)) != 0 ||
        (rc = get_str(r, ev, idx, "name", &name)) != 0 ||
        (rc = event_thread(r, ev, idx, &t)) != 0) {
        return rc;
    }
    uint64_t key = loupe__hash_bytes((const char *)&id, sizeof(id)) ^
                   loupe__hash_bytes(cat, strlen(cat) + 1) * 31 ^
                   loupe__hash_bytes(name, strlen(name) + 1) * 961;
    const json_t *bp = json_object_get(ev, "bp");
    int enclosing = json_is_string(bp) && strcmp(json_string_value(bp), "e") == 0;
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

/* The phase of an event, 0 for an empty event to skip. */
static int event_phase(reader *r, const json_t *ev, size_t idx, char *ph) {
    if (!json_is_object(ev)) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: not an object", r->path, idx);
    }
    *ph = 0;
    if (json_object_size(ev) == 0) {
        return 0;
    }
    const json_t *p = json_object_get(ev, "ph");
    if (!json_is_string(p)) {
        return loupe__err(LOUPE_EFORMAT, "%s: event %zu: no \"ph\" string", r->path, idx);
    }
    if (json_string_length(p) == 1) {
        *ph = json_string_value(p)[0];
    } else {
        *ph = '?';
    }
    return 0;
}

static int timed_phase(char ph) {
    return ph == 'X' || ph == 'B' || ph == 'E' || ph == 'i' || ph == 'I' || ph == 'C' ||
           ph == 's' || ph == 't' || ph == 'f';
}

static int do_slice(reader *r, const json_t *ev, size_t idx, char ph, int64_t ts, int64_t dur) {
    size_t t;
    const char *name, *cat;
    uint32_t nargs;
    int rc;
    if ((rc = event_thread(r, ev, idx, &t)) != 0 ||
        (rc = get_str(r, ev, idx, "name", &name)) != 0 ||
        (rc = get_str(r, ev, idx, "cat", &cat)) != 0 ||
        (rc = conv_args(r, json_object_get(ev, "args"), &nargs)) != 0) {
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
    sl->category = loupe__mb_str(r->mb, cat);
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
    if (ph == 'B') {
        if (loupe__grow((void **)&st->stack, &st->cap, st->depth + 1, sizeof(open_b)) != 0) {
            return oom(r);
        }
        st->stack[st->depth++] = (open_b){s, ts};
    }
    return flow_v2_end(r, ev, t, s, ts, idx);
}

/* E: closes the innermost open B of the thread; merges its args (replacing equal keys). */
static int do_end(reader *r, const json_t *ev, size_t idx, int64_t ts) {
    size_t t;
    uint32_t nargs;
    int rc;
    if ((rc = event_thread(r, ev, idx, &t)) != 0) {
        return rc;
    }
    tstate *st = &r->ts[t];
    st->events++;
    if (st->depth == 0 || ts < st->stack[st->depth - 1].start_ns) {
        r->unmatched++;
        return 0;
    }
    open_b b = st->stack[--st->depth];
    loupe__mb_slice_at(r->mb, t, b.slice)->dur_ns = (uint64_t)(ts - b.start_ns);
    if ((rc = conv_args(r, json_object_get(ev, "args"), &nargs)) != 0) {
        return rc;
    }
    for (uint32_t i = 0; i < nargs; i++) {
        loupe_slice *sl = loupe__mb_slice_at(r->mb, t, b.slice);
        const char *key = loupe__mb_str(r->mb, r->args[i].key);
        uint32_t k = 0;
        while (k < sl->arg_count && sl->args[k].key != key) {
            k++;
        }
        if (k < sl->arg_count) {
            loupe_arg a = r->args[i];
            a.key = key;
            if (a.type == LOUPE_ARG_STRING) {
                a.v.s = loupe__mb_str(r->mb, a.v.s);
            }
            sl->args[k] = a;
        } else if (loupe__mb_slice_add_arg(r->mb, t, b.slice, &r->args[i]) != 0) {
            return oom(r);
        }
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

static int do_instant(reader *r, const json_t *ev, size_t idx, int64_t ts) {
    size_t t;
    const char *name;
    uint32_t nargs;
    int rc;
    if ((rc = event_thread(r, ev, idx, &t)) != 0 ||
        (rc = get_str(r, ev, idx, "name", &name)) != 0 ||
        (rc = conv_args(r, json_object_get(ev, "args"), &nargs)) != 0) {
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
static int do_counter(reader *r, const json_t *ev, size_t idx, int64_t ts) {
    const char *name;
    int rc = get_str(r, ev, idx, "name", &name);
    if (rc != 0) {
        return rc;
    }
    json_t *args = json_object_get(ev, "args");
    if (!json_is_object(args)) {
        return 0;
    }
    int only_value = json_object_size(args) == 1 && json_object_get(args, "value") != NULL;
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v) {
        loupe_counter_sample c = {.ts_ns = (uint64_t)ts};
        uint64_t u;
        double d;
        if (json_is_integer(v)) {
            c.i = (int64_t)json_integer_value(v);
        } else if (json_is_real(v)) {
            c.is_double = 1;
            c.d = json_real_value(v);
        } else if (marker_u64(r, v, &u)) {
            c.is_double = 1;
            c.d = (double)u;
        } else if (json_is_string(v) && str_double(json_string_value(v), &d)) {
            c.is_double = 1;
            c.d = d;
        } else {
            continue;
        }
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

static int do_meta_event(reader *r, const json_t *ev, size_t idx) {
    const char *name;
    int rc = get_str(r, ev, idx, "name", &name);
    if (rc != 0) {
        return rc;
    }
    const json_t *nv = json_object_get(json_object_get(ev, "args"), "name");
    if (!json_is_string(nv)) {
        return 0;
    }
    if (strcmp(name, "thread_name") == 0) {
        size_t t;
        if ((rc = event_thread(r, ev, idx, &t)) != 0) {
            return rc;
        }
        loupe__mb_thread_name(r->mb, t, json_string_value(nv));
    } else if (strcmp(name, "process_name") == 0) {
        const json_t *pv = json_object_get(ev, "pid");
        uint64_t pid = 0;
        if (pv != NULL && get_id(r, pv, 10, &pid, NULL) != 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: pid is not an integer", r->path, idx);
        }
        if (loupe__grow((void **)&r->pnames, &r->pname_cap, r->pname_count + 1, sizeof(pid_name)) !=
            0) {
            return oom(r);
        }
        r->pnames[r->pname_count++] = (pid_name){pid, loupe__mb_str(r->mb, json_string_value(nv))};
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* One event: times checked (and the trace's span updated), then built into the model with
 * absolute times; finish_model subtracts the origin. */
static int process_event(reader *r, const json_t *ev, size_t idx) {
    char ph = 0;
    int rc = event_phase(r, ev, idx, &ph);
    if (rc != 0 || (!timed_phase(ph) && ph != 'M')) {
        return rc;
    }
    int64_t ts = 0, dur = 0;
    if (ph != 'M') {
        int has_ts, has_dur = 0;
        if ((rc = get_ns(r, ev, idx, "ts", &ts, &has_ts)) != 0 ||
            (ph == 'X' && (rc = get_ns(r, ev, idx, "dur", &dur, &has_dur)) != 0)) {
            return rc;
        }
        if (!has_ts) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: no ts", r->path, idx);
        }
        if (ph == 'X' && !has_dur) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: X without dur", r->path, idx);
        }
        if (dur < 0) {
            return loupe__err(LOUPE_EFORMAT, "%s: event %zu: dur is negative", r->path, idx);
        }
        if (!r->have_time || ts < r->min_ns) {
            r->min_ns = ts;
        }
        if (!r->have_time || ts + dur > r->max_ns) {
            r->max_ns = ts + dur;
        }
        r->have_time = 1;
        const json_t *pv = json_object_get(ev, "pid");
        if (!r->have_pid && pv != NULL && get_id(r, pv, 10, &r->first_pid, NULL) == 0) {
            r->have_pid = 1;
        }
    }
    switch (ph) {
    case 'X':
    case 'B':
        return do_slice(r, ev, idx, ph, ts, dur);
    case 'E':
        return do_end(r, ev, idx, ts);
    case 'i':
    case 'I':
        return do_instant(r, ev, idx, ts);
    case 'C':
        return do_counter(r, ev, idx, ts);
    case 'M':
        return do_meta_event(r, ev, idx);
    default: /* s, t, f */
        return flow_v1_end(r, ev, idx, ph, ts);
    }
}

/* ---- metadata ---- */

/* A metadata value as text (strings as they are, anything else as compact JSON). */
static int put_meta(reader *r, const char *key, const json_t *v) {
    const char *text = json_is_string(v) ? json_string_value(v) : json_text(r, v);
    if (text == NULL || loupe__mb_metadata(r->mb, key, text) != 0) {
        return oom(r);
    }
    return 0;
}

static const char *meta_text(reader *r, const json_t *v) {
    if (json_is_string(v)) {
        return loupe__mb_str(r->mb, json_string_value(v));
    }
    const char *t = json_text(r, v);
    return t != NULL ? t : "";
}

static int meta_u64(reader *r, const char *key, const json_t *v, uint64_t *out) {
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 0;
    }
    if (marker_u64(r, v, out) || (json_is_string(v) && str_u64(json_string_value(v), 10, out))) {
        return 0;
    }
    return loupe__err(LOUPE_EFORMAT, "%s: metadata \"%s\" is not a non-negative integer", r->path,
                      key);
}

static int meta_double(reader *r, const char *key, const json_t *v, double *out) {
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    if (json_is_string(v) && str_double(json_string_value(v), out)) {
        return 0;
    }
    return loupe__err(LOUPE_EFORMAT, "%s: metadata \"%s\" is not a number", r->path, key);
}

/* loupe_thread_<tid>_<field>: the thread's loss accounting. 1 when the key is one, 0 if not. */
static int meta_thread(reader *r, const char *key, const json_t *v, int *rc) {
    static const char prefix[] = "loupe_thread_";
    if (strncmp(key, prefix, sizeof(prefix) - 1) != 0) {
        return 0;
    }
    const char *p = key + sizeof(prefix) - 1;
    char *end;
    if (!is_digit(*p)) {
        return 0;
    }
    errno = 0;
    uint64_t tid = strtoull(p, &end, 10);
    if (errno == ERANGE || *end != '_') {
        return 0;
    }
    uint64_t *field;
    size_t t = SIZE_MAX;
    end++;
    if (strcmp(end, "recorded") != 0 && strcmp(end, "dropped") != 0 &&
        strcmp(end, "capacity_needed") != 0) {
        return 0;
    }
    t = thread_of(r, tid);
    if (t == SIZE_MAX) {
        *rc = oom(r);
        return 1;
    }
    loupe_model_thread *th = loupe__mb_thread_at(r->mb, t);
    field = strcmp(end, "recorded") == 0  ? &th->events_recorded
            : strcmp(end, "dropped") == 0 ? &th->events_dropped
                                          : &th->capacity_needed;
    *rc = meta_u64(r, key, v, field);
    return 1;
}

/* One metadata object ("otherData" first, then "metadata", which wins). loupe's keys (in a loupe
 * file) map onto the model; every other key goes to model->metadata. */
static int read_meta(reader *r, const json_t *obj, int *has_duration) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int rc = 0;
        loupe_model *m = r->m;
        if (!r->loupe) {
            rc = put_meta(r, key, v);
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
            rc = put_meta(r, key, v);
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

static int is_loupe_meta(const json_t *obj) {
    return json_is_object(obj) && json_object_get(obj, "loupe_version") != NULL;
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
    free(r->args);
    free(r->pnames);
}

/* After the last event: times made relative to the origin, B still open closed, the metadata
 * ("otherData" then "metadata", which wins; each with its own big_ints), flows, the duration. */
static int finish_model(reader *r, const json_t *meta, int meta_big, const json_t *other,
                        int other_big) {
    loupe_model *m = r->m;
    int rc;
    meta = json_is_object(meta) ? meta : NULL;
    other = json_is_object(other) ? other : NULL;
    r->loupe = is_loupe_meta(meta) || is_loupe_meta(other);
    /* A loupe file's ts are relative to its origin already; anything else starts at 0. */
    r->origin_ns = r->have_time && !(r->loupe && r->min_ns >= 0) ? r->min_ns : 0;
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
    m->pid = r->first_pid;
    int has_duration = 0;
    r->big_ints = other_big;
    if (other != NULL && (rc = read_meta(r, other, &has_duration)) != 0) {
        return rc;
    }
    r->big_ints = meta_big;
    if (meta != NULL && (rc = read_meta(r, meta, &has_duration)) != 0) {
        return rc;
    }
    /* One process in the model: the name given to its pid, else the first name seen. */
    if (r->pname_count > 0) {
        m->process_name = r->pnames[0].name;
    }
    for (size_t i = 0; i < r->pname_count; i++) {
        if (r->pnames[i].pid == m->pid) {
            m->process_name = r->pnames[i].name;
            break;
        }
    }
    if ((rc = link_flows(r)) != 0) {
        return rc;
    }
    m->unmatched_ends += r->unmatched;
    if (!has_duration && r->have_time) {
        m->duration_ns = (uint64_t)r->max_ns - (uint64_t)r->min_ns;
    }
    return loupe__mb_failed(r->mb) ? oom(r) : 0;
}

/* The whole-tree path: the fallback, whose errors carry jansson's line and column. */
static json_t *parse_whole(reader *r, char *text, size_t n, int *rc) {
    json_error_t err, first;
    json_t *root = json_loadb(text, n, JSON_ALLOW_NUL, &err);
    if (root != NULL) {
        return root;
    }
    first = err;
    char *fixed = NULL;
    if (json_error_code(&err) == json_error_numeric_overflow) {
        int no_mem = 0;
        size_t fn = 0;
        fixed = rewrite_big_ints(text, n, &fn, &no_mem);
        if (no_mem) {
            *rc = oom(r);
            return NULL;
        }
        if (fixed != NULL) {
            root = json_loadb(fixed, fn, JSON_ALLOW_NUL, &err);
            if (root != NULL) {
                r->big_ints = 1;
                free(fixed);
                return root;
            }
            first = err;
            text = fixed;
            n = fn;
        }
    }
    size_t skip = 0;
    while (skip < n && is_space(text[skip])) {
        skip++;
    }
    if (skip < n && text[skip] == '[') {
        /* read_text left TEXT_PAD bytes after the text (rewrite_big_ints too) */
        size_t keep = repair_len(text + skip, n - skip);
        if (keep > 0) {
            text[skip + keep] = ']';
            root = json_loadb(text + skip, keep + 1, JSON_ALLOW_NUL, &err);
            if (root != NULL) {
                r->big_ints = fixed != NULL;
                free(fixed);
                return root;
            }
        }
    }
    free(fixed);
    if (json_error_code(&first) == json_error_out_of_memory) {
        *rc = oom(r);
    } else {
        *rc = loupe__err(LOUPE_EFORMAT, "%s: line %d column %d: %s", r->path, first.line,
                         first.column, first.text);
    }
    return NULL;
}

static int read_tree(reader *r, json_t *root) {
    const json_t *events = root;
    const json_t *meta = NULL, *other = NULL;
    if (json_is_object(root)) {
        events = json_object_get(root, "traceEvents");
        meta = json_object_get(root, "metadata");
        other = json_object_get(root, "otherData");
    }
    if (!json_is_array(events)) {
        return loupe__err(LOUPE_EFORMAT, "%s: not a Chrome JSON trace (no traceEvents array)",
                          r->path);
    }
    size_t n = json_array_size(events);
    for (size_t i = 0; i < n; i++) {
        int rc = process_event(r, json_array_get(events, i), i);
        if (rc != 0) {
            return rc;
        }
    }
    return finish_model(r, meta, r->big_ints, other, r->big_ints);
}

/* The streaming path: walks the text itself and gives jansson one event (or top-level value) at
 * a time, so memory holds the text and the model, not a tree of the whole trace (jansson's trees
 * take about 16 times the text). Whatever it does not expect (a syntax error, a truncated object
 * form, duplicate traceEvents) makes it answer FALLBACK: the whole-tree path then reads the file
 * again and words any error with jansson's line and column. */
#define FALLBACK 1

static size_t skip_ws(const char *t, size_t n, size_t i) {
    while (i < n && is_space(t[i])) {
        i++;
    }
    return i;
}

/* The end of the JSON value at t[i]: brackets and quotes matched, a scalar up to the next
 * delimiter. SIZE_MAX when the text ends first. Validates nothing: jansson parses the value. */
static size_t value_end(const char *t, size_t n, size_t i) {
    char c = t[i];
    if (c == '"' || c == '{' || c == '[') {
        size_t depth = 0;
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
            } else if (c == '}' || c == ']') {
                if (--depth == 0) {
                    return i + 1;
                }
            }
        }
        return SIZE_MAX;
    }
    while (i < n && !is_space(t[i]) && t[i] != ',' && t[i] != ']' && t[i] != '}') {
        i++;
    }
    return i < n ? i : SIZE_MAX;
}

/* One value parsed by jansson; integers above INT64_MAX rewritten (r->big_ints then set). NULL
 * when jansson rejects it (*rc set only for out-of-memory). */
static json_t *parse_value(reader *r, const char *t, size_t n, int *rc) {
    json_error_t err;
    r->big_ints = 0;
    json_t *v = json_loadb(t, n, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
    if (v == NULL && json_error_code(&err) == json_error_numeric_overflow) {
        int no_mem = 0;
        size_t fn = 0;
        char *fixed = rewrite_big_ints(t, n, &fn, &no_mem);
        if (fixed != NULL) {
            v = json_loadb(fixed, fn, JSON_ALLOW_NUL | JSON_DECODE_ANY, &err);
            r->big_ints = v != NULL;
            free(fixed);
        }
        if (no_mem) {
            *rc = oom(r);
        }
    } else if (v == NULL && json_error_code(&err) == json_error_out_of_memory) {
        *rc = oom(r);
    }
    return v;
}

/* The events array at t[i] == '['; *end: just after its ']'. Not closed, or closed after a
 * trailing ',': with `lenient` (the array form) the complete events stand and a partial last one
 * is dropped; else FALLBACK. */
static int walk_events(reader *r, const char *t, size_t n, size_t i, int lenient, size_t *end) {
    *end = n;
    i = skip_ws(t, n, i + 1);
    if (i < n && t[i] == ']') {
        *end = i + 1;
        return 0;
    }
    for (size_t idx = 0;; idx++) {
        size_t e = i < n ? value_end(t, n, i) : SIZE_MAX;
        if (e == SIZE_MAX) {
            return lenient ? 0 : FALLBACK;
        }
        int rc = 0;
        json_t *ev = parse_value(r, t + i, e - i, &rc);
        if (ev == NULL) {
            return rc != 0 ? rc : FALLBACK;
        }
        rc = process_event(r, ev, idx);
        json_decref(ev);
        r->big_ints = 0;
        if (rc != 0) {
            return rc;
        }
        i = skip_ws(t, n, e);
        if (i >= n) {
            return lenient ? 0 : FALLBACK;
        }
        if (t[i] == ']') {
            *end = i + 1;
            return 0;
        }
        if (t[i] != ',') {
            return FALLBACK;
        }
        i = skip_ws(t, n, i + 1);
        if (i < n && t[i] == ']') {
            *end = i + 1;
            return lenient ? 0 : FALLBACK;
        }
    }
}

/* The members of the top-level object at t[i] == '{'. */
static int walk_object(reader *r, const char *t, size_t n, size_t i, size_t *end, json_t **meta,
                       int *meta_big, json_t **other, int *other_big) {
    int seen_events = 0, rc = 0;
    i = skip_ws(t, n, i + 1);
    while (rc == 0) {
        size_t ke = i < n && t[i] == '"' ? value_end(t, n, i) : SIZE_MAX;
        json_t *key = ke != SIZE_MAX ? parse_value(r, t + i, ke - i, &rc) : NULL;
        if (!json_is_string(key)) {
            json_decref(key);
            return rc != 0 ? rc : FALLBACK;
        }
        i = skip_ws(t, n, ke);
        if (i >= n || t[i] != ':' || (i = skip_ws(t, n, i + 1)) >= n) {
            json_decref(key);
            return FALLBACK;
        }
        const char *k = json_string_value(key);
        if (strcmp(k, "traceEvents") == 0) {
            rc = seen_events || t[i] != '[' ? FALLBACK : walk_events(r, t, n, i, 0, &i);
            seen_events = 1;
        } else {
            size_t ve = value_end(t, n, i);
            json_t *v = ve != SIZE_MAX ? parse_value(r, t + i, ve - i, &rc) : NULL;
            if (v == NULL) {
                rc = rc != 0 ? rc : FALLBACK;
            } else if (strcmp(k, "metadata") == 0 || strcmp(k, "otherData") == 0) {
                json_t **slot = k[0] == 'm' ? meta : other;
                json_decref(*slot);
                *slot = v;
                *(k[0] == 'm' ? meta_big : other_big) = r->big_ints;
            } else {
                json_decref(v);
            }
            i = ve;
        }
        json_decref(key);
        if (rc != 0) {
            break;
        }
        i = skip_ws(t, n, i);
        if (i < n && t[i] == '}') {
            *end = i + 1;
            return seen_events ? 0 : FALLBACK;
        }
        if (i >= n || t[i] != ',') {
            return FALLBACK;
        }
        i = skip_ws(t, n, i + 1);
    }
    return rc;
}

static int read_streaming(reader *r, const char *t, size_t n) {
    size_t i = skip_ws(t, n, 0), end = n;
    json_t *meta = NULL, *other = NULL;
    int meta_big = 0, other_big = 0, rc = FALLBACK;
    if (i < n && t[i] == '[') {
        rc = walk_events(r, t, n, i, 1, &end);
    } else if (i < n && t[i] == '{') {
        rc = walk_object(r, t, n, i, &end, &meta, &meta_big, &other, &other_big);
    }
    if (rc == 0 && skip_ws(t, n, end) != n) {
        rc = FALLBACK;
    }
    if (rc == 0) {
        rc = finish_model(r, meta, meta_big, other, other_big);
    }
    json_decref(meta);
    json_decref(other);
    return rc;
}

static int reader_init(reader *r, const char *path) {
    memset(r, 0, sizeof(*r));
    r->path = path;
    r->mb = loupe__mb_new();
    if (r->mb == NULL) {
        return oom(r);
    }
    r->m = loupe__mb_model(r->mb);
    return 0;
}

int loupe_trace_read(const char *path, loupe_model **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (path == NULL || out == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_read: %s is NULL",
                          path == NULL ? "path" : "out");
    }
    char *buf = NULL;
    size_t n = 0;
    int rc = read_text(path, &buf, &n);
    if (rc != 0) {
        return rc;
    }
    return loupe__trace_read_mem(path, buf, n, out); /* by content: detect.c */
}

int loupe__chrome_json_read_mem(const char *path, char *buf, size_t n, loupe_model **out) {
    int rc;
    *out = NULL;
    char *text = buf;
    if (n >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        n -= 3;
    }
    reader r;
    if ((rc = reader_init(&r, path)) == 0) {
        rc = read_streaming(&r, text, n);
    }
    if (rc == FALLBACK) {
        reader_free(&r);
        loupe__mb_abort(r.mb);
        if ((rc = reader_init(&r, path)) == 0) {
            json_t *root = parse_whole(&r, text, n, &rc);
            free(buf);
            buf = NULL;
            if (root != NULL) {
                rc = read_tree(&r, root);
                json_decref(root);
            }
        }
    }
    free(buf);
    reader_free(&r);
    if (rc != 0) {
        loupe__mb_abort(r.mb);
        return rc;
    }
    *out = loupe__mb_finish(r.mb);
    return *out != NULL ? 0 : oom(&r);
}

/* ---- loupe_trace_find ---- */

/* Natural order: digit runs compare as numbers, so run "..._10" sorts after "..._9" and a name
 * sorts after its own prefix ("X" < "X_2"). */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (is_digit(*a) && is_digit(*b)) {
            while (*a == '0' && is_digit(a[1])) {
                a++;
            }
            while (*b == '0' && is_digit(b[1])) {
                b++;
            }
            size_t la = 0, lb = 0;
            while (is_digit(a[la])) {
                la++;
            }
            while (is_digit(b[lb])) {
                lb++;
            }
            if (la != lb) {
                return la < lb ? -1 : 1;
            }
            int c = memcmp(a, b, la);
            if (c != 0) {
                return c;
            }
            a += la;
            b += lb;
        } else {
            if (*a != *b) {
                return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
            }
            a++;
            b++;
        }
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int is_kind(const char *dir, const char *name, mode_t kind) {
    char p[4096];
    struct stat st;
    if (snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p) || stat(p, &st) != 0) {
        return 0;
    }
    return (st.st_mode & S_IFMT) == kind;
}

static int cmp_name(const void *a, const void *b) {
    return natural_cmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i]);
    }
    free(v);
}

/* The entries of dir of one kind (S_IFREG / S_IFDIR), not hidden, in natural order. */
static int list_dir(const char *dir, mode_t kind, char ***out, size_t *count) {
    *out = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        return loupe__err(LOUPE_EIO, "%s: %s", dir, strerror(errno));
    }
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !is_kind(dir, e->d_name, kind)) {
            continue;
        }
        char *s = strdup(e->d_name);
        if (s == NULL || loupe__grow((void **)&v, &cap, n + 1, sizeof(char *)) != 0) {
            free(s);
            free_names(v, n);
            closedir(d);
            return loupe__err(LOUPE_ENOMEM, "%s: out of memory listing it", dir);
        }
        v[n++] = s;
    }
    closedir(d);
    if (n > 1) {
        qsort(v, n, sizeof(char *), cmp_name);
    }
    *out = v;
    *count = n;
    return 0;
}

static int put_path(char *buf, size_t size, const char *dir, const char *name) {
    int w = name != NULL ? snprintf(buf, size, "%s/%s", dir, name) : snprintf(buf, size, "%s", dir);
    if (w < 0 || (size_t)w >= size) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_trace_find: the path of %s%s%s needs %d bytes, "
                          "the buffer holds %zu",
                          dir, name ? "/" : "", name ? name : "", w + 1, size);
    }
    return 0;
}

/* The one trace in dir: a single *.trace.json.gz, else a single *.json / *.json.gz.
 * 1 when found, 0 when dir holds none, or an error. */
static int trace_in_dir(const char *dir, char *buf, size_t size) {
    char **names;
    size_t n;
    int rc = list_dir(dir, S_IFREG, &names, &n);
    if (rc != 0) {
        return rc;
    }
    const char *pick = NULL;
    int found = 0;
    for (int pass = 0; pass < 4 && !found; pass++) {
        size_t hits = 0;
        char list[512] = "";
        for (size_t i = 0; i < n; i++) {
            const char *s = names[i];
            /* passes 2 and 3: a run directory written with --format perfetto or xplane only */
            int ok = pass == 0   ? ends_with(s, ".trace.json.gz")
                     : pass == 1 ? ends_with(s, ".json") || ends_with(s, ".json.gz")
                     : pass == 2 ? ends_with(s, ".pftrace")
                                 : ends_with(s, ".xplane.pb");
            if (!ok) {
                continue;
            }
            pick = s;
            size_t l = strlen(list);
            snprintf(list + l, sizeof(list) - l, "%s%s", hits ? ", " : "", s);
            hits++;
        }
        if (hits > 1) {
            rc = loupe__err(LOUPE_EIO, "%s holds %zu traces (%s): name the one to read", dir, hits,
                            list);
            free_names(names, n);
            return rc;
        }
        found = hits == 1;
    }
    rc = found ? put_path(buf, size, dir, pick) : 0;
    free_names(names, n);
    return rc != 0 ? rc : found;
}

int loupe_trace_find(const char *path, char *buf, size_t size) {
    if (path == NULL || buf == NULL || size == 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_find: %s",
                          path == NULL  ? "path is NULL"
                          : buf == NULL ? "buf is NULL"
                                        : "size is 0");
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) {
        return put_path(buf, size, path, NULL);
    }
    /* A log_dir (plugins/profile/<run>/) first, else a directory holding the trace. */
    char profile[4096];
    if (snprintf(profile, sizeof(profile), "%s/plugins/profile", path) >= (int)sizeof(profile)) {
        return loupe__err(LOUPE_EINVALID, "%s: path too long", path);
    }
    int rc;
    if (stat(profile, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = trace_in_dir(path, buf, size);
        if (rc == 0) {
            return loupe__err(LOUPE_EIO,
                              "%s: no trace in it (*.trace.json.gz, *.json, *.json.gz) and no "
                              "plugins/profile/<run> directory",
                              path);
        }
        return rc < 0 ? rc : 0;
    }
    char **runs;
    size_t n;
    if ((rc = list_dir(profile, S_IFDIR, &runs, &n)) != 0) {
        return rc;
    }
    if (n == 0) {
        free(runs);
        return loupe__err(LOUPE_EIO, "%s: no run in it", profile);
    }
    char run[4096];
    int w = snprintf(run, sizeof(run), "%s/%s", profile, runs[n - 1]);
    free_names(runs, n);
    if (w < 0 || (size_t)w >= sizeof(run)) {
        return loupe__err(LOUPE_EINVALID, "%s: path too long", profile);
    }
    rc = trace_in_dir(run, buf, size);
    if (rc == 0) {
        return loupe__err(LOUPE_EIO,
                          "%s: the newest run holds no trace (*.trace.json.gz, *.json, *.json.gz)",
                          run);
    }
    return rc < 0 ? rc : 0;
}
