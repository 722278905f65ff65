/* hash.h: the string hash for every intern table in src/ (header-only).
 *
 * 64-bit FNV-1a (Fowler, Noll, Vo: http://www.isthe.com/chongo/tech/comp/fnv/, and
 * draft-eastlake-fnv): offset basis 14695981039346656037 (0xcbf29ce484222325), prime
 * 1099511628211 (0x100000001b3); "" hashes to the offset basis, "a" to 0xaf63dc4c8601ec8c,
 * "foobar" to 0x85944171f73967e8 (tests/test_base.c checks these).
 */
#ifndef LOUPE_BASE_HASH_H
#define LOUPE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define LOUPE__FNV_OFFSET 0xcbf29ce484222325ull
#define LOUPE__FNV_PRIME 0x100000001b3ull

/* FNV-1a of n bytes at p (p may be NULL when n is 0). Thread-safety: any thread. */
static inline uint64_t loupe__hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = LOUPE__FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ s[i]) * LOUPE__FNV_PRIME;
    }
    return h;
}

/* FNV-1a of a NUL-terminated string (without the NUL), in one pass. */
static inline uint64_t loupe__hash_str(const char *s) {
    uint64_t h = LOUPE__FNV_OFFSET;
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * LOUPE__FNV_PRIME;
    }
    return h;
}

#endif
