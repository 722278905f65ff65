/* b64.c: base64 (RFC 4648 §4): see b64.h. */
#include "base/b64.h"

#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t loupe__b64_len(size_t n) {
    return (n + 2) / 3 * 4;
}

void loupe__b64_encode(char *out, const unsigned char *in, size_t n) {
    size_t i = 0, o = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = alphabet[v >> 6 & 63];
        out[o++] = alphabet[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = alphabet[v >> 6 & 63];
        out[o++] = '=';
    }
}

static int digit(unsigned char c) {
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

size_t loupe__b64_decode(unsigned char *out, const unsigned char *in, size_t n) {
    if (n % 4 != 0) {
        return (size_t)-1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int pad = last && in[i + 3] == '=' ? (in[i + 2] == '=' ? 2 : 1) : 0;
        uint32_t v = 0;
        for (int k = 0; k < 4; k++) {
            int d = k >= 4 - pad ? 0 : digit(in[i + (size_t)k]);
            if (d < 0) {
                return (size_t)-1; /* outside the alphabet, or '=' not at the end */
            }
            v = v << 6 | (uint32_t)d;
        }
        if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) {
            return (size_t)-1; /* RFC 4648 §3.5: bits under the padding must be zero */
        }
        out[o++] = (unsigned char)(v >> 16);
        if (pad < 2) {
            out[o++] = (unsigned char)(v >> 8);
        }
        if (pad < 1) {
            out[o++] = (unsigned char)v;
        }
    }
    return o;
}
