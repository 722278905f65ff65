/* utf8.h: UTF-8 validation and sanitising (utf8.c), shared by the JSON string writer
 * (export/sink.c) and the XPlane writer, so that a name is cleaned the same way in every format.
 *
 * Valid means well-formed per RFC 3629 §4 / Unicode Table 3-7: no overlong forms (C0, C1,
 * E0 80..9F, F0 80..8F), no UTF-16 surrogates (ED A0..BF), nothing above U+10FFFF (F4 90..,
 * F5..FF), no stray continuation bytes, no sequence cut short. Each byte that does not start a
 * valid sequence becomes one U+FFFD (EF BF BD) and decoding resumes at the next byte (so "\xE2\x82"
 * is two U+FFFD, and "\xE2\x82A" is two U+FFFD then "A").
 */
#ifndef LOUPE_BASE_UTF8_H
#define LOUPE_BASE_UTF8_H

#include <stddef.h>

/* The length (1..4) of the valid sequence at p, or 0 when p[0] does not start one. Reads at most
 * min(avail, 4) bytes and stops at the first byte that is not a continuation byte, so a
 * NUL-terminated string may pass avail = 4 whatever its length. avail must be >= 1. */
size_t loupe__utf8_seq_len(const unsigned char *p, size_t avail);

/* Receives the sanitised output in pieces (valid runs of the input, and U+FFFD). */
typedef void (*loupe__utf8_put)(void *ctx, const char *p, size_t n);

/* Sanitises n bytes at s: passes the output to put (when not NULL) in order, and returns its
 * length in bytes (n when s is valid UTF-8; each invalid byte adds 2). Thread-safety: any
 * thread. */
size_t loupe__utf8_sanitize(const char *s, size_t n, loupe__utf8_put put, void *ctx);

#endif
