/* sink.h: where writers stream bytes: a gzip file, a plain file, or memory. A 64 KiB buffer in
 * front of the sink keeps per-event writes cheap; the first write error sticks (err: its LOUPE_E*
 * code, err_no: the errno behind it) and every later write is a no-op, so writers check once at
 * the end: loupe__sink_close() returns the code and puts the path and errno in the detail. */
#ifndef LOUPE_EXPORT_SINK_H
#define LOUPE_EXPORT_SINK_H

#include <loupe/export.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

typedef struct loupe__sink {
    /* 0, or LOUPE_EIO / LOUPE_ENOMEM with s->err_no set to the errno (0 when none applies) */
    int (*write)(struct loupe__sink *s, const void *p, size_t n);
    struct loupe__pgz *pgz; /* a gzip file: pgz.c deflates it in blocks */
    FILE *f;
    char *mem; /* memory sink: malloc'd, grows */
    size_t mem_len, mem_cap;
    const char *path; /* for the detail: the file, or "memory"; borrowed until close */
    int err;          /* first LOUPE_E* code, 0 when fine */
    int err_no;       /* the errno behind err, 0 when none */
    size_t n;
    uint64_t bytes; /* uncompressed bytes written */
    char buf[65536];
} loupe__sink;

/* A gzip file written in blocks deflated on helper threads (pgz.c): one gzip member, any gzip
 * reader reads it. open writes the header into f (which stays the caller's to close, after
 * close or discard); write and close return 0 or the errno of the first failure (ENOMEM when
 * zlib or a block could not get memory; open returns LOUPE_ENOMEM). Uses up to 3 helper
 * threads (one less than the CPUs; LOUPE_GZIP_THREADS=1..4 sets the threads in all) between
 * open and close. Thread-safety: one thread at a time per loupe__pgz. */
typedef struct loupe__pgz loupe__pgz;
int loupe__pgz_open(loupe__pgz **out, FILE *f);
int loupe__pgz_write(loupe__pgz *g, const void *p, size_t n);
int loupe__pgz_close(loupe__pgz *g);
void loupe__pgz_discard(loupe__pgz *g);

/* Opens a sink: gzip (level 1: fast, JSON still shrinks ~10x; deflated on helper threads,
 * pgz) when gz, plain otherwise.
 * path must stay valid until loupe__sink_close(). Returns 0, or LOUPE_EIO / LOUPE_ENOMEM with the
 * detail "cannot create <path>: <strerror> (errno N)". */
int loupe__sink_open_file(loupe__sink *s, const char *path, int gz);
LOUPE_API void loupe__sink_open_mem(loupe__sink *s);
/* Flushes and closes; returns 0 or the first error's LOUPE_E* code (LOUPE_EIO, LOUPE_ENOMEM) with
 * the detail "cannot write <path>: <strerror> (errno N)". A memory sink keeps s->mem (caller
 * frees). */
LOUPE_API int loupe__sink_close(loupe__sink *s);
/* Closes after a failure that is already reported (a writer's): frees what the sink holds, memory
 * included, and leaves the detail alone. */
LOUPE_API void loupe__sink_discard(loupe__sink *s);

void loupe__sink_flush(loupe__sink *s);

static inline void loupe__put(loupe__sink *s, const char *p, size_t n) {
    if (sizeof(s->buf) - s->n < n) {
        loupe__sink_flush(s);
        if (n > sizeof(s->buf)) {
            if (s->err == 0) {
                s->err = s->write(s, p, n);
            }
            s->bytes += n;
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        s->buf[s->n + i] = p[i];
    }
    s->n += n;
}

static inline void loupe__puts(loupe__sink *s, const char *str) {
    size_t n = 0;
    while (str[n]) {
        n++;
    }
    loupe__put(s, str, n);
}

/* Decimal integers, ns as µs with exactly 3 decimals, doubles (%.17g, finite; NaN/Inf as null),
 * and JSON strings (escaped: ", \, control characters; invalid UTF-8 bytes become U+FFFD). */
void loupe__put_u64(loupe__sink *s, uint64_t v);
void loupe__put_i64(loupe__sink *s, int64_t v);
void loupe__put_us(loupe__sink *s, uint64_t ns);
void loupe__put_double(loupe__sink *s, double d);
void loupe__put_jstr(loupe__sink *s, const char *str);

#endif
