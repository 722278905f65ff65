/* utf8.c: UTF-8 validation and sanitising (utf8.h). */
#include "base/utf8.h"

size_t loupe__utf8_seq_len(const unsigned char *p, size_t avail) {
    unsigned c = p[0];
    size_t k = c < 0x80                   ? 1
               : (c >= 0xC2 && c <= 0xDF) ? 2
               : (c >= 0xE0 && c <= 0xEF) ? 3
               : (c >= 0xF0 && c <= 0xF4) ? 4
                                          : 0; /* 80..BF continuation, C0/C1 overlong, F5.. */
    for (size_t j = 1; j < k; j++) {
        if (j >= avail || (p[j] & 0xC0) != 0x80) {
            return 0;
        }
    }
    if (k == 3 && ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0))) {
        return 0; /* overlong, or a UTF-16 surrogate */
    }
    if (k == 4 && ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90))) {
        return 0; /* overlong, or above U+10FFFF */
    }
    return k;
}

size_t loupe__utf8_sanitize(const char *s, size_t n, loupe__utf8_put put, void *ctx) {
    const unsigned char *u = (const unsigned char *)s;
    size_t out = 0, i = 0, run = 0; /* run: start of the pending valid bytes */
    while (i < n) {
        size_t k = loupe__utf8_seq_len(u + i, n - i);
        if (k > 0) {
            i += k;
            out += k;
            continue;
        }
        if (put != NULL) {
            if (i > run) {
                put(ctx, s + run, i - run);
            }
            put(ctx, "\xEF\xBF\xBD", 3);
        }
        out += 3;
        i++;
        run = i;
    }
    if (put != NULL && i > run) {
        put(ctx, s + run, i - run);
    }
    return out;
}
