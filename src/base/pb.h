/* pb.h: a tiny protobuf wire encoder and bounded decoder (internal; header-only).
 *
 * Shared by the Perfetto protobuf writer/reader (perfetto_proto.c) and the XPlane writer/reader
 * (xplane.c): anyone may use it, add to it, never change what an existing function does.
 *
 * Encoding: a loupe__pb buffer grows (realloc doubling) and is reused from message to message, so
 * it holds one message at a time (its size is the largest message, not the trace). Nested
 * messages reserve a 1-byte length, and pb_end() moves the body right when the length needs more
 * bytes: small messages (the common case) cost no copy. Wire types (protobuf encoding spec):
 * 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. Repeated scalars are written one tag per
 * element (unpacked), since Perfetto's decoders read only unpacked data for fields not declared
 * [packed=true] (Perfetto's track_event.proto; its decoder reads these unpacked).
 *
 * The XPlane writer streams into a sink in two passes (size, then write) instead of a buffer:
 * it uses the *_at encoders and the *_size helpers, which give the same bytes and sizes.
 *
 * Decoding: loupe__pbr reads fields from a byte range and never reads past it; every length is
 * checked against what remains, so a garbage varint or a 1 GB length claim is an error (with the
 * offset) and never an allocation. loupe__pbr_field says what was wrong as a code with the
 * offsets (loupe__pbe), for a reader to word its own message; loupe__pbr_next words it.
 * A varint is at most 10 bytes and 64 bits: a 10th byte above 1 is an error, not silently cut.
 */
#ifndef LOUPE_EXPORT_PB_H
#define LOUPE_EXPORT_PB_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2, PB_I32 = 5 };

typedef struct loupe__pb {
    uint8_t *p;
    size_t len, cap;
    int oom; /* sticky: set when a grow failed (the content is then garbage) */
} loupe__pb;

static inline int loupe__pb_reserve(loupe__pb *b, size_t n) {
    if (b->cap - b->len >= n) {
        return 1;
    }
    if (b->oom) {
        return 0;
    }
    size_t nc = b->cap ? b->cap : 256;
    while (nc - b->len < n) {
        nc *= 2;
    }
    uint8_t *np = realloc(b->p, nc);
    if (np == NULL) {
        b->oom = 1;
        b->len = 0;
        return 0;
    }
    b->p = np;
    b->cap = nc;
    return 1;
}

static inline void loupe__pb_free(loupe__pb *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static inline size_t loupe__pb_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes v at dst (room for 10 bytes); returns the bytes written. */
static inline size_t loupe__pb_put_varint_at(uint8_t *dst, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        dst[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    dst[n++] = (uint8_t)v;
    return n;
}

static inline void loupe__pb_varint(loupe__pb *b, uint64_t v) {
    if (loupe__pb_reserve(b, 10)) {
        b->len += loupe__pb_put_varint_at(b->p + b->len, v);
    }
}

/* The tag varint's value: field number and wire type. */
static inline uint64_t loupe__pb_key(uint32_t field, int wire) {
    return ((uint64_t)field << 3) | (uint64_t)wire;
}

/* Writes v little-endian at dst (8 bytes). */
static inline void loupe__pb_put_fixed64_at(uint8_t *dst, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        dst[i] = (uint8_t)(v >> (8 * i));
    }
}

/* Encoded sizes in bytes of a whole field (tag included): what a writer that streams needs to
 * prefix a nested message with its length before writing it. */
static inline uint64_t loupe__pb_tag_size(uint32_t field) {
    return loupe__pb_varint_size(loupe__pb_key(field, 0));
}

static inline uint64_t loupe__pb_uint_size(uint32_t field, uint64_t v) {
    return loupe__pb_tag_size(field) + loupe__pb_varint_size(v);
}

static inline uint64_t loupe__pb_fixed64_size(uint32_t field) {
    return loupe__pb_tag_size(field) + 8;
}

/* A length-delimited field (bytes, string, nested message) of n bytes. */
static inline uint64_t loupe__pb_len_size(uint32_t field, uint64_t n) {
    return loupe__pb_tag_size(field) + loupe__pb_varint_size(n) + n;
}

static inline void loupe__pb_tag(loupe__pb *b, uint32_t field, int wire) {
    loupe__pb_varint(b, loupe__pb_key(field, wire));
}

static inline void loupe__pb_uint(loupe__pb *b, uint32_t field, uint64_t v) {
    loupe__pb_tag(b, field, PB_VARINT);
    loupe__pb_varint(b, v);
}

/* int32/int64 fields: a negative value is the 10-byte two's-complement varint. */
static inline void loupe__pb_int(loupe__pb *b, uint32_t field, int64_t v) {
    loupe__pb_uint(b, field, (uint64_t)v);
}

static inline void loupe__pb_fixed64(loupe__pb *b, uint32_t field, uint64_t v) {
    loupe__pb_tag(b, field, PB_I64);
    if (loupe__pb_reserve(b, 8)) {
        loupe__pb_put_fixed64_at(b->p + b->len, v);
        b->len += 8;
    }
}

static inline void loupe__pb_double(loupe__pb *b, uint32_t field, double d) {
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    loupe__pb_fixed64(b, field, v);
}

static inline void loupe__pb_bytes(loupe__pb *b, uint32_t field, const void *p, size_t n) {
    loupe__pb_tag(b, field, PB_LEN);
    loupe__pb_varint(b, n);
    if (loupe__pb_reserve(b, n)) {
        memcpy(b->p + b->len, p, n);
        b->len += n;
    }
}

static inline void loupe__pb_str(loupe__pb *b, uint32_t field, const char *s) {
    loupe__pb_bytes(b, field, s, strlen(s));
}

/* Starts a nested message (field, wire type 2); returns the mark for loupe__pb_end(). */
static inline size_t loupe__pb_begin(loupe__pb *b, uint32_t field) {
    loupe__pb_tag(b, field, PB_LEN);
    if (!loupe__pb_reserve(b, 1)) {
        return 0;
    }
    b->p[b->len++] = 0;
    return b->len;
}

static inline void loupe__pb_end(loupe__pb *b, size_t mark) {
    if (b->oom || mark == 0) {
        return;
    }
    size_t n = b->len - mark;
    if (n < 0x80) {
        b->p[mark - 1] = (uint8_t)n;
        return;
    }
    size_t extra = loupe__pb_varint_size(n) - 1;
    if (!loupe__pb_reserve(b, extra)) {
        return;
    }
    memmove(b->p + mark + extra, b->p + mark, n);
    loupe__pb_put_varint_at(b->p + mark - 1, n);
    b->len += extra;
}

/* ---- decoding ---- */

typedef struct loupe__pbr {
    const uint8_t *p, *end;
    const uint8_t *base; /* the start of the file: offsets in errors are p - base */
} loupe__pbr;

typedef struct loupe__pbf {
    uint32_t field;
    int wire;
    uint64_t v;          /* varint / fixed value */
    const uint8_t *data; /* PB_LEN: the bytes */
    size_t len;
    size_t offset; /* of the tag, from base */
} loupe__pbf;

/* Why a read failed (loupe__pbr_field, loupe__pbr_uvarint). */
enum {
    LOUPE__PB_ECUT = 1, /* a varint or fixed-width value runs past the end of its range */
    LOUPE__PB_E64,      /* a varint of more than 64 bits (a 10th byte above 1, or an 11th) */
    LOUPE__PB_EFIELD0,  /* field number 0 */
    LOUPE__PB_ERANGE,   /* field number above 2^29 - 1 (the tag does not fit 32 bits) */
    LOUPE__PB_EWIRE,    /* wire type 3 or 4 (groups), 6 or 7 */
    LOUPE__PB_ELEN,     /* a length that runs past the end of its range */
};

typedef struct loupe__pbe {
    int code;     /* LOUPE__PB_E* */
    int in_tag;   /* the error is in the tag varint (else in the value or the length) */
    size_t at;    /* offset of the bad byte, from base: the first missing byte (ECUT), the
                   * varint's first byte (E64), the tag (EFIELD0, ERANGE, EWIRE, ELEN) */
    size_t value; /* offset of the value or length, just after the tag */
    uint64_t len; /* ELEN: the length claimed */
    size_t left;  /* ELEN: the bytes left after the length varint */
} loupe__pbe;

/* Reads a varint; 0 on success, else the LOUPE__PB_E* code with e->at set (r->p is then
 * unspecified). */
static inline int loupe__pbr_uvarint(loupe__pbr *r, uint64_t *out, loupe__pbe *e) {
    uint64_t v = 0;
    const uint8_t *start = r->p;
    for (unsigned i = 0; i < 10; i++) {
        if (r->p >= r->end) {
            e->at = (size_t)(r->p - r->base);
            return e->code = LOUPE__PB_ECUT;
        }
        uint8_t c = *r->p++;
        if (i == 9 && c > 1) {
            e->at = (size_t)(start - r->base);
            return e->code = LOUPE__PB_E64;
        }
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *out = v;
            return 0;
        }
    }
    e->at = (size_t)(start - r->base); /* not reached: a 10th byte with 0x80 is above 1 */
    return e->code = LOUPE__PB_E64;
}

/* Reads a varint; 0 on success, -1 when it runs past end or holds more than 64 bits. */
static inline int loupe__pbr_varint(loupe__pbr *r, uint64_t *out) {
    loupe__pbe e;
    return loupe__pbr_uvarint(r, out, &e) == 0 ? 0 : -1;
}

/* Reads the next field. Returns 1 with *f set (f->data and f->len only for PB_LEN), 0 at the end
 * of the range, -1 on malformed input with *e set (and f->offset, f->field and f->wire as far as
 * they were read). */
static inline int loupe__pbr_field(loupe__pbr *r, loupe__pbf *f, loupe__pbe *e) {
    if (r->p >= r->end) {
        return 0;
    }
    memset(e, 0, sizeof *e);
    f->offset = (size_t)(r->p - r->base);
    uint64_t tag;
    e->in_tag = 1;
    if (loupe__pbr_uvarint(r, &tag, e) != 0) {
        return -1;
    }
    e->in_tag = 0;
    e->at = f->offset;
    if (tag > 0xffffffffu) {
        e->code = LOUPE__PB_ERANGE;
        return -1;
    }
    f->field = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    if (f->field == 0) {
        e->code = LOUPE__PB_EFIELD0;
        return -1;
    }
    e->value = (size_t)(r->p - r->base);
    switch (f->wire) {
    case PB_VARINT:
        return loupe__pbr_uvarint(r, &f->v, e) != 0 ? -1 : 1;
    case PB_I64:
    case PB_I32: {
        size_t n = f->wire == PB_I64 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n) {
            e->at = e->value;
            e->code = LOUPE__PB_ECUT;
            return -1;
        }
        f->v = 0;
        for (size_t i = 0; i < n; i++) {
            f->v |= (uint64_t)r->p[i] << (8 * i);
        }
        r->p += n;
        return 1;
    }
    case PB_LEN: {
        uint64_t n;
        if (loupe__pbr_uvarint(r, &n, e) != 0) {
            return -1;
        }
        if (n > (uint64_t)(r->end - r->p)) {
            e->code = LOUPE__PB_ELEN;
            e->len = n;
            e->left = (size_t)(r->end - r->p);
            return -1;
        }
        f->data = r->p;
        f->len = (size_t)n;
        r->p += n;
        return 1;
    }
    default:
        e->code = LOUPE__PB_EWIRE;
        return -1;
    }
}

/* Reads the next field. Returns 1 with *f set, 0 at the end of the range, -1 on malformed input
 * (*err_offset is then the offset of the bad byte, and *what says what was wrong). */
static inline int loupe__pbr_next(loupe__pbr *r, loupe__pbf *f, size_t *err_offset,
                                  const char **what) {
    loupe__pbe e;
    int k = loupe__pbr_field(r, f, &e);
    if (k >= 0) {
        return k;
    }
    if (e.in_tag || e.code == LOUPE__PB_ERANGE) {
        *err_offset = f->offset;
        *what = "bad field tag varint";
    } else if (e.code == LOUPE__PB_EFIELD0) {
        *err_offset = f->offset;
        *what = "field number 0";
    } else if (e.code == LOUPE__PB_EWIRE) {
        *err_offset = f->offset;
        *what = "unsupported wire type (groups or 6/7)";
    } else if (f->wire == PB_VARINT) {
        *err_offset = e.value;
        *what = "truncated or overlong varint";
    } else if (f->wire == PB_LEN) {
        *err_offset = e.value;
        *what = e.code == LOUPE__PB_ELEN ? "length runs past the end of its message"
                                         : "truncated or overlong length varint";
    } else {
        *err_offset = e.value;
        *what = "truncated fixed-width value";
    }
    return -1;
}

/* A file cut short ends inside its last top-level field: its tag, its length or its bytes run
 * past the end. These find the longest prefix of whole fields, so that a reader can read as far
 * as the file is valid and say where it was cut (perfetto_proto.c, xplane.c). */

/* Reads a varint at b[*i, n); 0 when it runs past n or over 10 bytes. */
static inline int loupe__pb_cut_varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*i >= n) {
            return 0;
        }
        uint8_t c = b[(*i)++];
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            return 1;
        }
    }
    return 0;
}

/* The field of b[at, n) as far as its header: 1 when it is whole (*end: where it ends), 0 when
 * it runs past n (*data: where its bytes start, n when the header itself is cut; *len: the
 * length it announces), -1 when it is malformed (the reader's own error then says so). */
static inline int loupe__pb_cut_field(const uint8_t *b, size_t n, size_t at, size_t *end,
                                      uint32_t *field, size_t *data, uint64_t *len) {
    size_t i = at;
    uint64_t tag, v;
    *data = n;
    *len = 0;
    *field = 0;
    if (!loupe__pb_cut_varint(b, n, &i, &tag)) {
        return n - at < 10 ? 0 : -1;
    }
    *field = (uint32_t)(tag >> 3);
    size_t start = i; /* a varint cut by the end has fewer than its 10 bytes at most */
    switch (tag & 7) {
    case PB_VARINT:
        if (!loupe__pb_cut_varint(b, n, &i, &v)) {
            return n - start < 10 ? 0 : -1;
        }
        break;
    case PB_I64:
        i += 8;
        break;
    case PB_I32:
        i += 4;
        break;
    case PB_LEN:
        if (!loupe__pb_cut_varint(b, n, &i, len)) {
            return n - start < 10 ? 0 : -1;
        }
        *data = i;
        if (*len > n - i) {
            return 0;
        }
        i += (size_t)*len;
        break;
    default:
        return -1;
    }
    if (i > n) {
        *data = n;
        return 0;
    }
    *end = i;
    return 1;
}

/* The length of the longest prefix of b[0, n) made of whole top-level fields (n when nothing
 * is cut, or when a field is malformed: read_trace reports it); *count: how many. */
static inline size_t loupe__pb_whole_prefix(const uint8_t *b, size_t n, size_t *count) {
    size_t at = 0, end, data;
    uint32_t field;
    uint64_t len;
    *count = 0;
    while (at < n) {
        int k = loupe__pb_cut_field(b, n, at, &end, &field, &data, &len);
        if (k == 0) {
            return at;
        }
        if (k < 0) {
            return n;
        }
        at = end;
        ++*count;
    }
    return n;
}

#endif
