/* json.h: loupe's pull JSON parser (json.c), for the Chrome JSON reader: the caller walks the
 * top level (the events array) itself and asks for one value at a time, which the parser builds
 * into a small tree of nodes that the next value reuses; so memory holds the text and the model,
 * never a tree of the whole trace (jansson's DOM took about 16 times the text and ran at
 * ~0.4 M events/s; this runs at several million).
 *
 * Strings are decoded in place (an escape never takes more bytes decoded than written; the
 * closing quote becomes the NUL), so the text must be writable, and a string lives as long as
 * the text. Lone UTF-16 surrogate escapes decode as U+FFFD; other bytes are kept as they are
 * (the writers sanitise UTF-8). Numbers keep their decimal mantissa and exponent, so integers
 * are exact to UINT64_MAX and INT64_MIN, and a time in µs with up to 19 digits converts to ns
 * exactly. Syntax: RFC 8259, plus nothing: no NaN, no comments, no trailing commas inside a
 * value (the reader allows one at the end of the events array). Nesting is limited to
 * LOUPE__JSON_MAX_DEPTH levels. Single-threaded per parser; parsers share nothing.
 */
#ifndef LOUPE_IMPORT_JSON_H
#define LOUPE_IMPORT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define LOUPE__JSON_MAX_DEPTH 1000

typedef enum loupe__jtype {
    LOUPE__J_NULL,
    LOUPE__J_FALSE,
    LOUPE__J_TRUE,
    LOUPE__J_NUM,
    LOUPE__J_STR,
    LOUPE__J_ARR,
    LOUPE__J_OBJ
} loupe__jtype;

typedef struct loupe__jnode {
    uint8_t type;    /* loupe__jtype */
    uint8_t neg;     /* NUM: a leading '-' */
    uint8_t integer; /* NUM: no fraction, no exponent, and the digits fit mant */
    uint8_t inexact; /* NUM: more than 19 significant digits (mant holds the first 19) */
    uint32_t next;   /* the next sibling's index, 0 = none (node 0 is a root, never a sibling) */
    uint32_t first;  /* ARR / OBJ: the first child's index, 0 = none */
    uint32_t count;  /* ARR / OBJ: children */
    int32_t exp10;   /* NUM: value = (neg ? -1 : 1) * mant * 10^exp10 */
    uint64_t mant;
    const char *key; /* a member's key (decoded, NUL-terminated), NULL in an array or a root */
    const char *s;   /* STR: decoded, NUL-terminated; NUM: the literal in the text */
    size_t len;      /* STR: decoded bytes (may hold NULs from \u0000); NUM: literal bytes */
} loupe__jnode;

enum { LOUPE__JSON_OK = 0, LOUPE__JSON_EOF = 1, LOUPE__JSON_SYNTAX = 2, LOUPE__JSON_NOMEM = 3 };

typedef struct loupe__jp {
    char *t;
    size_t n, i; /* the text, its length, the cursor */
    loupe__jnode *nodes;
    size_t count, cap;
    /* the last failure: where (byte offset) and what ("string expected") */
    size_t err_at;
    const char *err_what;
    /* what the in-place decoding overwrote since the last reset (loupe__jp_undo) */
    struct loupe__jundo {
        size_t at, len, off; /* len bytes at t[at] were undo_bytes[off..] */
    } * undo;
    size_t undo_count, undo_cap;
    char *undo_bytes;
    size_t undo_len, undo_bytes_cap;
} loupe__jp;

/* Skips blanks; returns the byte at the cursor, or -1 at the end. Inline: called between every
 * two tokens. */
static inline int loupe__jp_peek(loupe__jp *p) {
    while (p->i < p->n) {
        unsigned char c = (unsigned char)p->t[p->i];
        if (c > ' ' || (c != ' ' && c != '\t' && c != '\n' && c != '\r')) {
            return c;
        }
        p->i++;
    }
    return -1;
}
/* Parses the value at the cursor (after blanks) into nodes appended to p->nodes; *root is its
 * index. The cursor moves past it. Returns LOUPE__JSON_*: EOF when the text ends inside it,
 * SYNTAX otherwise (err_at, err_what set), NOMEM. Call loupe__jp_reset() between values whose
 * nodes are no longer needed. */
int loupe__jp_value(loupe__jp *p, uint32_t *root);
void loupe__jp_reset(loupe__jp *p);
/* Puts back every byte the strings decoded in place since the last reset overwrote (the value
 * began at t[from]), so that a value cut by the end of a window can be parsed again once the
 * window holds all of it. Only after a parse that returned LOUPE__JSON_EOF. */
void loupe__jp_undo(loupe__jp *p, size_t from);
void loupe__jp_free(loupe__jp *p);
/* The 1-based line and column (bytes) of offset off. O(off): for error messages. */
void loupe__jp_linecol(const loupe__jp *p, size_t off, size_t *line, size_t *col);

/* A member of an object node by key, NULL when absent (the last one when the key repeats). */
const loupe__jnode *loupe__jp_get(const loupe__jp *p, const loupe__jnode *obj, const char *key);
static inline const loupe__jnode *loupe__jp_at(const loupe__jp *p, uint32_t i) {
    return i != 0 ? &p->nodes[i] : NULL;
}
/* A NUM as a double (correctly rounded: the C library's strtod, in the C locale's syntax). */
double loupe__jp_double(const loupe__jnode *v);
/* A NUM as an int64 / uint64 when it is an integer in range; 0 when not (then *out untouched). */
int loupe__jp_i64(const loupe__jnode *v, int64_t *out);
int loupe__jp_u64(const loupe__jnode *v, uint64_t *out);
/* A NUM times 10^shift, rounded half away from zero to an integer, when |result| < limit. */
int loupe__jp_scaled(const loupe__jnode *v, int shift, int64_t limit, int64_t *out);

/* Appends compact JSON of node v to *buf (malloc'd, *len bytes used, *cap allocated,
 * NUL-terminated). Returns 0 or -1 on out-of-memory. */
int loupe__jp_dump(const loupe__jp *p, const loupe__jnode *v, char **buf, size_t *len, size_t *cap);

#endif
